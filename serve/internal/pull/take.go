package pull

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
)

// Handout is a task a consume took: its lease, or none if the take did
// not count (another take or an acknowledgment came first), with the
// error of a take that could not be written (the task is offered again).
type Handout struct {
	Task  *consumer.Task
	Lease string
	Err   error
}

// Take takes up to n tasks offered in qs, on terms: when wait, the first
// as soon as one is offered before ctx ends, the rest only if they are
// offered already (takeWithPlaces). It answers each take's handout, and
// when the consumer took them: nil if none was offered.
func (pl *Pull) Take(ctx context.Context, qs []*Queue, n int, wait bool, terms Terms) ([]Handout, time.Time) {
	offered := pl.takeWithPlaces(ctx, qs, n, wait)
	if len(offered) == 0 {
		return nil, time.Time{}
	}
	terms.placeBy = time.Now().Add(placeTry)
	for _, l := range offered {
		l.terms <- terms
	}
	now := time.Now()
	out := make([]Handout, len(offered))
	for i, l := range offered {
		rep := <-l.reply
		out[i] = Handout{Task: l.task, Lease: rep.lease, Err: rep.err}
	}
	return out, now
}

// take returns the first task of the hand-out order of the first queue
// that offers one: at once, or, when wait, as soon as one does before ctx
// ends; nil if none. Of several queues, the first named is taken first,
// as lmstfy's consume of several queues does: before it takes a later
// queue's task, it waits up to orderWait for a task of an earlier one
// on its way, one this server published within recentPublish and has not
// offered since (awaitEarlier).
func take(ctx context.Context, ps []*Queue, wait bool) *lease {
	var cases []reflect.SelectCase
	ordered := len(ps) < 2
	for {
		cases = append(cases[:0], reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
		for k, p := range ps {
			if !ordered && k > 0 && p.offers.len() > 0 {
				ordered = true
				if l := awaitEarlier(ctx, ps[:k]); l != nil {
					return l
				}
			}
			l, added := p.offers.pop()
			if l != nil {
				return l
			}
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(added)})
		}
		if !wait {
			return nil
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			return nil
		}
	}
}

// Of a consume of several queues (take): how recent a publish to an
// earlier queue is waited for, and how long at most: the job comes within
// milliseconds, but on a loaded Kafka cluster within hundreds.
const (
	recentPublish = time.Second
	orderWait     = time.Second
)

// awaitEarlier waits up to orderWait, or until ctx ends, for a task of
// one of ps on its way (published by this server within recentPublish,
// and none offered since), and takes it; nil if none came, or none is on
// its way.
func awaitEarlier(ctx context.Context, ps []*Queue) *lease {
	since := time.Now().Add(-recentPublish).UnixNano()
	timer := time.NewTimer(orderWait)
	defer timer.Stop()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}, {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)}}
	var from []*Queue
	for _, p := range ps {
		if pub := p.published.Load(); pub < since || pub < p.offered.Load() {
			continue
		}
		l, added := p.offers.pop()
		if l != nil {
			return l
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(added)})
		from = append(from, p)
	}
	if len(from) == 0 {
		return nil
	}
	if i, _, _ := reflect.Select(cases); i >= 2 {
		l, _ := from[i-2].offers.pop()
		return l
	}
	return nil
}

// ackCommitWait bounds how long an acknowledgment waits for its commit.
const ackCommitWait = 30 * time.Second

// pullCommitInterval is the pull worker's commit interval: an
// acknowledgment answers once its commit is visible, so it waits for the
// next commit. A worker with nothing finished does not commit, so idle
// queues cost no transactions.
const pullCommitInterval = time.Millisecond

// pullShutdown is how long a stopping server's worker waits for its
// handlers: they wait for consumers, not work, so their tasks are
// abandoned at once (and run again, at the same attempt, their leases
// kept).
const pullShutdown = time.Second

// QueueExists reports whether topic exists: a topic seen once is known
// from then on.
func (pl *Pull) QueueExists(ctx context.Context, topic string) (bool, error) {
	pl.mu.Lock()
	known := pl.known[topic]
	pl.mu.Unlock()
	if known || pl.w.Load().Owns(topic) {
		return true, nil
	}
	_, err := pl.adm.DescribeTopic(ctx, onceq.QueueTopic(topic))
	if errors.Is(err, broker.ErrTopicNotFound) {
		pl.adm.Forget(onceq.QueueTopic(topic)) // asked again next time, not answered from the client's cache
		return false, nil
	}
	if err != nil {
		return false, err
	}
	pl.mu.Lock()
	pl.known[topic] = true
	pl.mu.Unlock()
	return true, nil
}
