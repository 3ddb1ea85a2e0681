package producer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// wakeRetry is how long a producer that could not make the wake-up topic
// waits before it tries again; meanwhile it writes no wake-ups, and the
// workers find its tasks by looking at their quiet partitions' offsets.
const wakeRetry = 10 * time.Second

// wake tells the workers that q has a new task (broker.WakeTopic), unless
// the producer did so less than broker.WakeEvery ago. A wake-up is a hint:
// one that is lost only delays the task until a worker's next look at its
// quiet partitions, so its errors are not reported.
func (p *Producer) wake(ctx context.Context, q *topicState, now time.Time) {
	last, n := q.woke.Load(), now.UnixNano()
	if n-last < int64(broker.WakeEvery) || !q.woke.CompareAndSwap(last, n) {
		return
	}
	if !p.wakeReady(ctx, now) {
		return
	}
	p.cl.Produce(context.Background(), &kgo.Record{Topic: broker.WakeTopic, Key: []byte(q.name)}, func(*kgo.Record, error) {})
}

// wakeReady makes sure the wake-up topic exists, asking the brokers once
// (and again wakeRetry after a failure).
func (p *Producer) wakeReady(ctx context.Context, now time.Time) bool {
	if p.wakeOK.Load() {
		return true
	}
	if at := p.wakeFailedAt.Load(); at != 0 && now.UnixNano()-at < int64(wakeRetry) {
		return false
	}
	if _, err := p.ensure(ctx, broker.WakeTopic, false); err != nil {
		// Said once at warn level: a producer without the right to make
		// the topic would say it every wakeRetry otherwise.
		log := p.cfg.log.Debug
		if p.wakeFailedAt.Swap(now.UnixNano()) == 0 {
			log = p.cfg.log.Warn
		}
		log("cannot write wake-ups: workers find this producer's tasks on quiet queues a little later", "topic", broker.WakeTopic, "err", err)
		return false
	}
	p.wakeOK.Store(true)
	return true
}
