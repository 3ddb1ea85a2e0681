package producer

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/ctltopic"
)

// Hints: records a producer writes beside its tasks for the workers, none
// of which a task needs to run. A wake-up (broker.WakeTopic) tells the
// workers of a quiet queue to fetch it; a priority note (ctltopic.
// PriorityNote) tells them that its topic holds tasks of a priority above
// 0, which they then read ahead of a backlog for. A lost hint only
// delays a task, so their errors are not reported.

// hintRetry is how long a producer that could not make a hint's topic
// waits before it tries again; meanwhile it writes no such hints.
const hintRetry = 10 * time.Second

// hintTopic is the topic of one kind of hint, made once by the producer.
type hintTopic struct {
	name string
	what string // what is lost without it, for the log
	ok   atomic.Bool
	// failedAt is when making it last failed (unix ns).
	failedAt atomic.Int64
}

// wake tells the workers that q has a new task (broker.WakeTopic), unless
// the producer did so less than broker.WakeEvery ago. Without one, the
// workers find the task by looking at their quiet partitions' offsets.
func (p *Producer) wake(ctx context.Context, q *topicState, now time.Time) {
	if !due(&q.woke, now, broker.WakeEvery) || !p.hintReady(ctx, &p.wakeTopic, now) {
		return
	}
	p.cl.Produce(context.Background(), &kgo.Record{Topic: broker.WakeTopic, Key: []byte(q.name)}, func(*kgo.Record, error) {})
}

// notePriority writes the priority note of t's topic, unless the producer
// did so less than ctltopic.PriorityNoteEvery ago. Without one, the workers
// read ahead of a backlog for t only once their fetch met a task of a
// priority above 0 in its topic.
func (p *Producer) notePriority(ctx context.Context, q *topicState, t *onceq.Task) {
	now := time.Now()
	if t.Priority <= 0 || !due(&q.noted, now, ctltopic.PriorityNoteEvery) || !p.hintReady(ctx, &p.controlTopic, now) {
		return
	}
	p.cl.Produce(context.Background(), ctltopic.PriorityNote(onceq.QueueTopic(t.Queue), now).Record(), func(*kgo.Record, error) {})
}

// due reports whether a hint last written at *last (unix ns; 0: never)
// is due again at now, every apart, and claims it if so.
func due(last *atomic.Int64, now time.Time, every time.Duration) bool {
	was, n := last.Load(), now.UnixNano()
	return (was == 0 || n-was >= int64(every)) && last.CompareAndSwap(was, n)
}

// hintReady makes sure a hint's topic exists, asking the brokers once
// (and again hintRetry after a failure).
func (p *Producer) hintReady(ctx context.Context, h *hintTopic, now time.Time) bool {
	if h.ok.Load() {
		return true
	}
	if at := h.failedAt.Load(); at != 0 && now.UnixNano()-at < int64(hintRetry) {
		return false
	}
	if _, err := p.ensure(ctx, h.name, false); err != nil {
		// Said once at warn level: a producer without the right to make
		// the topic would say it every hintRetry otherwise.
		log := p.cfg.log.Debug
		if h.failedAt.Swap(now.UnixNano()) == 0 {
			log = p.cfg.log.Warn
		}
		log("cannot write to "+h.name+": "+h.what, "err", err)
		return false
	}
	h.ok.Store(true)
	return true
}
