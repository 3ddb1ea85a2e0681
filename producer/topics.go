package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

// ErrQueueNotFound is returned for a task whose queue does not exist when
// the producer does not create queues (see CreateQueues).
var ErrQueueNotFound = errors.New("queue not found")

// ErrCreateQueue is returned for a task whose queue does not exist and
// could not be created (CreateQueues): the brokers refused it (a policy,
// a quota, an ACL, its partitions), with their reason, or did not answer.
var ErrCreateQueue = errors.New("cannot create the queue")

// missingRecheck is how long a queue found missing is refused without
// asking the broker again, so that a loop submitting to a missing queue
// does not flood the broker with metadata requests.
const missingRecheck = time.Second

// topicState caches what the producer knows about a queue or bucket
// topic. Once ready, the hot path only loads it from the map.
type topicState struct {
	name  string
	ready atomic.Bool // the topic exists
	// recs is a queue's records topic, once the producer ensured it.
	recs atomic.Pointer[recordsState]

	mu        sync.Mutex // serializes lookups
	missingAt time.Time  // when the broker last said the queue is missing

	// Queues only: the queue's metrics.
	submitted   prometheus.Counter
	duration    prometheus.Observer
	submissions atomic.Uint64 // counted by Submit and SubmitAsync, to sample duration (SubmitMany samples per call)
	woke        atomic.Int64  // unix ns of the queue's last wake-up (see wake)
	noted       atomic.Int64  // unix ns of the queue's last priority note (see notePriority)
}

// noteError forgets that a topic exists when the broker says it does not
// (it was deleted), so that the next task looks it up again.
func (p *Producer) noteError(topic string, err error) {
	if !errors.Is(err, kerr.UnknownTopicOrPartition) && !errors.Is(err, kerr.UnknownTopicID) {
		return
	}
	if v, ok := p.topics.Load(topic); ok {
		v.(*topicState).ready.Store(false)
	}
}

// route returns the topic a resolved task goes to, and its queue's topic:
// the queue's topic (the queue itself, or a lane queue's lane), or for a
// task due later the bucket the planner chooses.
// Both must exist; missing bucket topics are created.
func (p *Producer) route(ctx context.Context, t *onceq.Task, now time.Time) (dest, q *topicState, err error) {
	// Tasks usually come in runs of one queue: the last queue's state
	// saves a lookup in the map, and its hashing of the name.
	topic := onceq.QueueTopic(t.Queue) // a lane queue's tasks go to its lane
	if q = p.lastQueue.Load(); q == nil || q.name != topic || !q.ready.Load() {
		if q, err = p.ensure(ctx, topic, false); err != nil {
			return nil, nil, err
		}
		p.lastQueue.Store(q)
	}
	if !t.DelayedAt(now) {
		return q, q, nil
	}
	pl, err := p.planner(ctx)
	if err != nil {
		return nil, nil, err
	}
	hop := pl.Route(now, t.Due)
	if dest, err = p.ensure(ctx, hop.Topic, true); err != nil {
		return nil, nil, err
	}
	return dest, q, nil
}

// planner returns the planner delayed tasks route by: the cluster's
// ladder, read by the first of them and checked against the one the
// options gave, if any (delay.ClusterPlanner).
func (p *Producer) planner(ctx context.Context) (*delay.Planner, error) {
	if pl := p.ladder.Load(); pl != nil {
		return pl, nil
	}
	p.ladderMu.Lock()
	defer p.ladderMu.Unlock()
	if pl := p.ladder.Load(); pl != nil {
		return pl, nil
	}
	pl, err := delay.ClusterPlanner(ctx, p.cfg.conn, p.cfg.planner)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	p.ladder.Store(pl)
	return pl, nil
}

// ensure returns the state of a topic that exists, looking it up (and
// creating it if allowed) the first time.
func (p *Producer) ensure(ctx context.Context, name string, bucket bool) (*topicState, error) {
	v, ok := p.topics.Load(name)
	if !ok {
		s := &topicState{name: name}
		if !bucket && name != broker.WakeTopic && name != broker.ControlTopic {
			s.submitted = p.m.submitted.WithLabelValues(p.m.label(name))
			s.duration = p.m.duration.WithLabelValues(p.m.label(name))
		}
		v, _ = p.topics.LoadOrStore(name, s)
	}
	s := v.(*topicState)
	if s.ready.Load() {
		return s, nil
	}
	return s, p.lookup(ctx, s)
}

// lookup asks the broker whether the topic exists, creating onceq's own
// topics (bucket topics, the workflow queue, the wake-up topic) always,
// as the catalogue (broker.TopicSpecOf) says, and queues when CreateQueues is
// set.
func (p *Producer) lookup(ctx context.Context, s *topicState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready.Load() {
		return nil
	}
	create := p.cfg.createPartitions
	if create == 0 && !s.missingAt.IsZero() && time.Since(s.missingAt) < missingRecheck {
		return p.missing(s.name)
	}
	var err error
	spec, own := broker.TopicSpecOf(s.name)
	switch {
	case own || create > 0:
		if !own {
			spec = broker.TopicSpec{Name: s.name, Partitions: create} // a queue: the broker's configs
		}
		var adm *broker.Admin
		if adm, err = p.admin(); err == nil {
			_, err = adm.EnsureTopics(ctx, []broker.TopicSpec{spec})
		}
		if err != nil && !own {
			return fmt.Errorf("producer: queue %q: %w (%d partitions): %w", s.name, ErrCreateQueue, create, err)
		}
	default:
		var exists bool
		if exists, err = p.exists(ctx, s.name); err == nil && !exists {
			s.missingAt = time.Now()
			return p.missing(s.name)
		}
	}
	if err != nil {
		return fmt.Errorf("looking up topic %s: %w", s.name, err)
	}
	s.ready.Store(true)
	s.missingAt = time.Time{}
	return nil
}

// exists asks the brokers whether a topic exists. The request goes out
// every time (Admin.PartitionCounts): kadm's topic listing answers from a
// metadata cache up to 5s old, which would keep refusing a queue created
// just after a refusal.
func (p *Producer) exists(ctx context.Context, name string) (bool, error) {
	adm, err := p.admin()
	if err != nil {
		return false, err
	}
	counts, err := adm.PartitionCounts(ctx, name)
	_, ok := counts[name]
	return ok, err
}

func (p *Producer) missing(queue string) error {
	return fmt.Errorf("producer: queue %q does not exist: create it with \"onceq topics create %s\", or let the producer create queues (CreateQueues, onceq produce --create-queues N): %w", queue, queue, ErrQueueNotFound)
}

// admin returns the admin client, connecting it the first time.
func (p *Producer) admin() (*broker.Admin, error) {
	p.admOnce.Do(func() {
		p.adm, p.admErr = broker.NewAdmin(p.cfg.conn)
	})
	return p.adm, p.admErr
}

// CheckQueue returns an error, wrapping ErrQueueNotFound, when queue does
// not exist and the producer does not create queues (CreateQueues): what
// submitting a task to it would say, without submitting one. A producer
// of workflows checks their steps' queues so.
func (p *Producer) CheckQueue(ctx context.Context, queue string) error {
	if err := onceq.ValidateAnyQueue(queue); err != nil {
		return err
	}
	_, err := p.ensure(ctx, onceq.QueueTopic(queue), false)
	return err
}
