package serve

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/internal/limit"
)

// limitJSON is a queue's limit as the API answers it.
type limitJSON struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Rate      string `json:"rate,omitempty"`
	Running   int    `json:"running,omitempty"`
	// RunningNow counts the queue's tasks its limit holds running now,
	// across every worker (GET only).
	RunningNow *int `json:"running_now,omitempty"`
}

func limitOf(r *http.Request, l control.Limit) limitJSON {
	return limitJSON{Namespace: r.PathValue("ns"), Queue: r.PathValue("queue"), Rate: l.Rate(), Running: l.Running}
}

// Limits of pulled queues. A job of a limited queue (package
// internal/limit) runs, under its queue's limit, while it is handed out to
// an HTTP consumer: from the moment a consumer takes it to its
// acknowledgment, or the end of its ttr. A job waiting for a consumer
// holds no place. The pull worker claims nothing (consumer.OwnLimits):
// the server that hands a job out claims its place, for the job's ttr
// and placeGrace, before it writes the take (handOut), and releases it
// once the lease ends (holdPlace). A server that dies holds its places
// until their ttr and placeGrace end. The rate counts hand-outs. A
// consumer takes no job of a queue whose limit has no place for it now
// (withPlace): it waits for one, until its timeout, while the jobs wait
// for it.

// placeGrace is how long past a hand-out's ttr its place holds when no
// release comes (its server died): the lease's expiry, written at the
// ttr by the server that runs the job, releases it before.
const placeGrace = 5 * time.Second

// placeTry bounds how long a job a consumer took waits for its place
// under its queue's limit (taken by another claim meanwhile): then it is
// offered again, and the consumer waits for a place.
const placeTry = time.Second

// placeCheck is how often a consumer looks again whether a limited queue
// it waits for has a place.
const placeCheck = 50 * time.Millisecond

// errNoPlace: the job's queue had no place for it under its limit in
// time: it is not handed out.
var errNoPlace = errors.New("no place under the queue's limit")

// handOut hands the task of l, the run of it at run, out to the consumer
// that took it on terms g: it claims the task's place under its queue's
// limit, writes the take and answers the consumer. It reports whether the
// take counted; a take that did not, or a place not had in time, leaves
// the consumer without the task, which is offered again. Its error is the
// lease topic's.
func (pl *pull) handOut(ctx context.Context, l *lease, key string, run runRef, g grant) (bool, error) {
	lg := pl.ledger
	release, err := pl.claimPlace(ctx, l.task.Queue, g)
	if err != nil {
		if !errors.Is(err, errNoPlace) && ctx.Err() == nil {
			lg.log.Warn("a place under the queue's limit could not be claimed: the job is offered again", "queue", l.task.Queue, "id", l.task.ID, "err", err)
		}
		l.reply <- takeReply{}
		return false, nil
	}
	counted, st, err := lg.write(ctx, key, leaseEvent{Kind: evTake, Holder: lg.id, Partition: run.Partition, Offset: run.Offset,
		Until: time.Now().Add(g.ttr).UnixMilli(), TTR: g.ttr.Milliseconds(), Freeze: g.freeze})
	switch {
	case err != nil:
		release()
		l.reply <- takeReply{err: err}
		return false, err
	case !counted:
		release()
		l.reply <- takeReply{}
		return false, nil
	}
	pl.holdPlace(key, st.Lease, st.Until, release)
	l.reply <- takeReply{lease: st.Lease}
	return true, nil
}

// claimPlace claims a place under topic's limit for a job a consumer
// takes on terms g, for its ttr and placeGrace, waiting until g.placeBy
// at most (then errNoPlace). A queue without a limit returns at once.
func (pl *pull) claimPlace(ctx context.Context, topic string, g grant) (limit.Release, error) {
	if pl.limits == nil {
		return func() {}, nil
	}
	by := g.placeBy
	if by.IsZero() {
		by = time.Now().Add(placeTry)
	}
	release, _, err := pl.limits.Acquire(ctx, topic, g.ttr+placeGrace, func() bool { return time.Now().After(by) })
	if errors.Is(err, limit.ErrGone) {
		return nil, errNoPlace
	}
	return release, err
}

// holdPlace keeps a hand-out's place until its lease, key's lease named
// lease, ends (acknowledged, expired, or forgotten), then releases it. It
// lets go without releasing once the claim lapsed by itself (until and
// placeGrace) or the server closes: its place holds until then.
func (pl *pull) holdPlace(key, lease string, until time.Time, release limit.Release) {
	go func() {
		lapse := time.NewTimer(time.Until(until.Add(placeGrace)))
		defer lapse.Stop()
		for {
			st, ok, changed, stop := pl.ledger.follow(key)
			if !ok || !st.Taken || st.Lease != lease {
				stop()
				release()
				return
			}
			select {
			case <-changed:
				continue
			case <-lapse.C:
			case <-pl.quit:
			}
			stop()
			return
		}
	}()
}

// withPlace returns the queues of qs whose limit has a place for a job
// now (all of them if none is limited), and whether that is all of them.
func (pl *pull) withPlace(qs []*pullQueue) (open []*pullQueue, all bool) {
	if pl.limits == nil {
		return qs, true
	}
	for i, q := range qs {
		if !pl.limits.HasPlace(q.topic) {
			if open == nil {
				open = append(make([]*pullQueue, 0, len(qs)), qs[:i]...)
			}
			continue
		}
		if open != nil {
			open = append(open, q)
		}
	}
	if open == nil {
		return qs, true
	}
	return open, false
}

// takeWithPlaces takes up to n tasks offered in the queues of qs whose
// limit has a place for them (take): when wait, the first as soon as one
// is offered before ctx ends, looking every placeCheck whether a limited
// queue has a place now; the rest only if they are offered already.
func (pl *pull) takeWithPlaces(ctx context.Context, qs []*pullQueue, n int, wait bool) []*lease {
	if len(qs) == 0 {
		// No queue that exists: none has a job, and the consume waits
		// out its timeout as lmstfy's does.
		if wait {
			<-ctx.Done()
		}
		return nil
	}
	for {
		open, all := pl.withPlace(qs)
		var offered []*lease
		if len(open) > 0 {
			tctx, cancel := ctx, context.CancelFunc(func() {})
			if wait && !all {
				tctx, cancel = context.WithTimeout(ctx, placeCheck)
			}
			l := take(tctx, open, wait)
			cancel()
			for l != nil {
				if offered = append(offered, l); len(offered) == n {
					break
				}
				l = take(ctx, open, false)
			}
		} else if wait {
			select {
			case <-ctx.Done():
			case <-time.After(placeCheck):
			}
		}
		if len(offered) > 0 || !wait || all || ctx.Err() != nil {
			return offered
		}
	}
}

// queueLimit returns topic's limit as the limits topic holds it now, and
// its tasks running under it (handed out, for a pulled queue): the
// server's follower of the topic reads it to its end first, so that a
// limit just set is seen.
func (s *Server) queueLimit(ctx context.Context, topic string) (control.QueueLimit, error) {
	c := s.pull.limits
	if err := c.Sync(ctx); err != nil {
		return control.QueueLimit{}, err
	}
	return control.QueueLimit{Limit: c.Limit(topic), RunningNow: c.Running(topic)}, nil
}

// parseLimit reads a limit from its rate and running parameters (the
// API's query, the console's form): at least one, each valid.
func parseLimit(rate, running string) (control.Limit, error) {
	var l control.Limit
	var err error
	if rate != "" {
		if l.Count, l.Per, err = control.ParseRate(rate); err != nil {
			return l, badRequest("rate", "%v", err)
		}
	}
	if running != "" {
		if l.Running, err = strconv.Atoi(running); err != nil || l.Running < 1 || l.Running > limit.MaxRunning {
			return l, badRequest("running", "%q: want a whole number of tasks running at once, 1 to %d", running, limit.MaxRunning)
		}
	}
	if l.None() {
		return l, badRequest("rate", "give a rate (10/s, 600/m), a number of tasks running at once, or both")
	}
	return l, nil
}

// getLimit: GET /api/{ns}/{queue}/limit.
func (s *Server) getLimit(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	l, err := s.queueLimit(r.Context(), topic)
	if err != nil {
		writeError(w, err)
		return
	}
	out := limitOf(r, l.Limit)
	out.RunningNow = &l.RunningNow
	writeJSON(w, http.StatusOK, out)
}

// setLimit: PUT /api/{ns}/{queue}/limit?rate=&running=: the limit given
// replaces the queue's.
func (s *Server) setLimit(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	l, err := parseLimit(r.URL.Query().Get("rate"), r.URL.Query().Get("running"))
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.ctl.SetLimit(r.Context(), topic, l); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, limitOf(r, l))
}

// liftLimit: DELETE /api/{ns}/{queue}/limit.
func (s *Server) liftLimit(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.ctl.SetLimit(r.Context(), topic, control.Limit{}); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, limitOf(r, control.Limit{}))
}

// consoleLimit: POST /console/q/{queue}/limit: sets the queue's limit
// from the form's rate and running, or lifts it (lift).
func (s *Server) consoleLimit(w http.ResponseWriter, r *http.Request, _ *page) {
	queue := r.PathValue("queue")
	var l control.Limit
	var err error
	if r.FormValue("lift") == "" {
		l, err = parseLimit(r.FormValue("rate"), r.FormValue("running"))
	}
	if err == nil {
		err = s.ctl.SetLimit(r.Context(), queue, l)
	}
	msg := queue + " limit: " + l.String()
	if err != nil {
		msg = err.Error()
	}
	back(w, r, "/console/q/"+url.PathEscape(queue), msg)
}
