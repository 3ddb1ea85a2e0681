package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve/internal/pull"
)

// The terms of a consume.
const (
	// DefaultTTR is a consume's time-to-run when it gives none, lmstfy's.
	DefaultTTR = 2 * time.Minute
	// MaxCount bounds the tasks one consume asks for.
	MaxCount = 100
	// MaxConsumeQueues bounds the queues one consume names.
	MaxConsumeQueues = 16
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
	ttr, err := durationParam(q, "ttr", DefaultTTR, time.Second, pull.HoldMax/2)
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
	until := time.Now().Add(wait + pull.WantGrace)
	queues := make([]*pull.Queue, 0, len(topics))
	for _, t := range topics {
		ok, err := s.pull.QueueExists(r.Context(), t)
		if err != nil {
			writeError(w, err)
			return
		}
		if !ok {
			continue // a queue that does not exist has no job, and is not made
		}
		q := s.pull.Want(t, until)
		queues = append(queues, q)
		if timeout > 0 {
			defer q.Wait()()
			s.pull.Announce(t, until, false)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	out := s.takeJobs(ctx, ns, queues, count, pull.Terms{TTR: ttr, Freeze: freeze})
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
func (s *Server) takeJobs(ctx context.Context, ns string, queues []*pull.Queue, count int, g pull.Terms) []lmstfyJob {
	var out []lmstfyJob
	for len(out) < count {
		taken, now := s.pull.Take(ctx, queues, count-len(out), len(out) == 0, g)
		if len(taken) == 0 {
			break
		}
		for _, h := range taken {
			if h.Err != nil {
				s.cfg.log.Warn("a take was not written to the lease topic: the task is offered again", "queue", h.Task.Queue, "id", h.Task.ID, "err", h.Err)
			}
			if h.Lease == "" {
				continue
			}
			j := lmstfyJobOf(ns, &h.Task.Task, now, !g.Freeze)
			j.Msg, j.TTR, j.Lease = "new job", int64(g.TTR/time.Second), h.Lease
			out = append(out, j)
			s.lm.Load().consume(ns, j.Queue, time.Duration(j.ElapsedMS)*time.Millisecond, len(queues))
		}
	}
	return out
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
