package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/producer"
)

// ImmediateWait is how long a consume with timeout=0 waits for a job: a
// job published just before it reaches the server's pull worker through
// Kafka, typically within milliseconds. A queue with no job answers 404
// after it.
const ImmediateWait = 250 * time.Millisecond

// consume: GET /api/{ns}/{q1},{q2}...?ttr=&timeout=&count=: long-polls
// up to timeout seconds (ImmediateWait for 0) for tasks of the queues, the
// first queue first, and hands out at most count, each for ttr seconds.
func (s *Server) consume(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	q := r.URL.Query()
	names := strings.Split(r.PathValue("queue"), ",")
	if len(names) > MaxConsumeQueues {
		writeError(w, badRequest("queue", "%d queues: one consume names at most %d: consume the others in another request", len(names), MaxConsumeQueues))
		return
	}
	topics := make([]string, len(names))
	for i, n := range names {
		t, err := s.queueOf(ns, n)
		if err != nil {
			writeError(w, err)
			return
		}
		topics[i] = t
	}
	ttr, err := durationParam(q, "ttr", DefaultTTR, time.Second, holdMax/2)
	if err != nil {
		writeError(w, err)
		return
	}
	timeout, err := durationParam(q, "timeout", 0, 0, s.cfg.maxWait)
	if err != nil {
		writeError(w, err)
		return
	}
	count := 1
	if v := q.Get("count"); v != "" {
		if count, err = strconv.Atoi(v); err != nil || count < 1 || count > MaxCount {
			writeError(w, badRequest("count", "%q: want a number of tasks from 1 to %d", v, MaxCount))
			return
		}
	}
	freeze, err := boolParam(q, "freeze_tries")
	if err != nil {
		writeError(w, err)
		return
	}
	// A consume that does not wait (timeout 0) still waits ImmediateWait
	// for a job: one published a moment before is on its way from Kafka
	// to the pull worker, where lmstfy's Redis would have it at once.
	wait := timeout
	if wait == 0 {
		wait = ImmediateWait
	}
	until := time.Now().Add(wait + wantGrace)
	queues := make([]*pullQueue, 0, len(topics))
	for _, t := range topics {
		ok, err := s.queueExists(r.Context(), t)
		if err != nil {
			writeError(w, err)
			return
		}
		if !ok {
			continue // a queue that does not exist has no job, and is not made
		}
		q := s.pull.want(t, until)
		queues = append(queues, q)
		if timeout > 0 {
			q.waiting.Add(1)
			defer q.waiting.Add(-1)
			s.pull.announce(t, until, false)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	out := s.takeJobs(ctx, ns, queues, count, grant{ttr: ttr, freeze: freeze})
	if len(out) == 0 {
		writeJSON(w, http.StatusNotFound, map[string]string{"msg": "no job available"})
		return
	}
	if count == 1 {
		writeJSON(w, http.StatusOK, out[0]) // lmstfy: one object unless count > 1
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// takeJobs takes up to count tasks offered by pullers on g's terms: the
// first waits until ctx ends, the rest are taken if they are offered
// already. A task is the consumer's once its take counted.
func (s *Server) takeJobs(ctx context.Context, ns string, queues []*pullQueue, count int, g grant) []lmstfyJob {
	var out []lmstfyJob
	for len(out) < count {
		offered := s.pull.takeWithPlaces(ctx, queues, count-len(out), len(out) == 0)
		if len(offered) == 0 {
			break
		}
		g.placeBy = time.Now().Add(placeTry)
		for _, l := range offered {
			l.terms <- g
		}
		now := time.Now()
		for _, l := range offered {
			rep := <-l.reply
			if rep.err != nil {
				s.cfg.log.Warn("a take was not written to the lease topic: the task is offered again", "queue", l.task.Queue, "id", l.task.ID, "err", rep.err)
			}
			if rep.lease == "" {
				continue
			}
			j := lmstfyJobOf(ns, &l.task.Task, now, !g.freeze)
			j.Msg, j.TTR, j.Lease = "new job", int64(g.ttr/time.Second), rep.lease
			out = append(out, j)
			s.lm.Load().consume(ns, j.Queue, time.Duration(j.ElapsedMS)*time.Millisecond, len(queues))
		}
	}
	return out
}

// take returns the first task of the hand-out order of the first queue
// that offers one: at once, or, when wait, as soon as one does before ctx
// ends; nil if none. Of several queues, the first named is taken first,
// as lmstfy's consume of several queues does: before it takes a later
// queue's task, it waits up to orderWait for a task of an earlier one
// on its way, one this server published within recentPublish and has not
// offered since (awaitEarlier).
func take(ctx context.Context, ps []*pullQueue, wait bool) *lease {
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
func awaitEarlier(ctx context.Context, ps []*pullQueue) *lease {
	since := time.Now().Add(-recentPublish).UnixNano()
	timer := time.NewTimer(orderWait)
	defer timer.Stop()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}, {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)}}
	var from []*pullQueue
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

// durationParam reads seconds (or a Go duration) from q[name], def when
// absent, within [lo, hi].
func durationParam(q map[string][]string, name string, def, lo, hi time.Duration) (time.Duration, error) {
	v := ""
	if vs := q[name]; len(vs) > 0 {
		v = vs[0]
	}
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(seconds(v))
	if err != nil || d < lo || d > hi {
		return 0, badRequest(name, "%q: want seconds (or a duration such as 90s) from %v to %v", v, lo, hi)
	}
	return d, nil
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

// queueExists reports whether topic exists: a topic seen once is known
// from then on.
func (s *Server) queueExists(ctx context.Context, topic string) (bool, error) {
	s.pull.mu.Lock()
	known := s.pull.known[topic]
	s.pull.mu.Unlock()
	if known || s.pull.w.Load().Owns(topic) {
		return true, nil
	}
	_, err := s.pull.adm.DescribeTopic(ctx, onceq.QueueTopic(topic))
	if errors.Is(err, broker.ErrTopicNotFound) {
		s.pull.adm.Forget(onceq.QueueTopic(topic)) // asked again next time, not answered from the client's cache
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.pull.mu.Lock()
	s.pull.known[topic] = true
	s.pull.mu.Unlock()
	return true, nil
}

// ensureQueue creates a queue that does not exist, with CreateQueues
// partitions, as a publish does (the producer's CheckQueue), or refuses
// it with CreateQueues(0).
func (s *Server) ensureQueue(ctx context.Context, topic string) error {
	err := s.p.CheckQueue(ctx, topic)
	if errors.Is(err, producer.ErrQueueNotFound) {
		return &apiError{status: http.StatusNotFound, field: "queue", msg: fmt.Sprintf("queue %s does not exist and this server does not create queues (--no-create-queues)", onceq.QueueTopic(topic))}
	}
	return taskError(err)
}
