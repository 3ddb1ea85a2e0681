package pull

import (
	"context"
	"errors"
	"time"

	"github.com/onceq/onceq/internal/limit"
)

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
func (pl *Pull) handOut(ctx context.Context, l *lease, key string, run runRef, g Terms) (bool, error) {
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
		Until: time.Now().Add(g.TTR).UnixMilli(), TTR: g.TTR.Milliseconds(), Freeze: g.Freeze})
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
func (pl *Pull) claimPlace(ctx context.Context, topic string, g Terms) (limit.Release, error) {
	if pl.limits == nil {
		return func() {}, nil
	}
	by := g.placeBy
	if by.IsZero() {
		by = time.Now().Add(placeTry)
	}
	release, _, err := pl.limits.Acquire(ctx, topic, g.TTR+placeGrace, func() bool { return time.Now().After(by) })
	if errors.Is(err, limit.ErrGone) {
		return nil, errNoPlace
	}
	return release, err
}

// holdPlace keeps a hand-out's place until its lease, key's lease named
// lease, ends (acknowledged, expired, or forgotten), then releases it. It
// lets go without releasing once the claim lapsed by itself (until and
// placeGrace) or the server closes: its place holds until then.
func (pl *Pull) holdPlace(key, lease string, until time.Time, release limit.Release) {
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
func (pl *Pull) withPlace(qs []*Queue) (open []*Queue, all bool) {
	if pl.limits == nil {
		return qs, true
	}
	for i, q := range qs {
		if !pl.limits.HasPlace(q.topic) {
			if open == nil {
				open = append(make([]*Queue, 0, len(qs)), qs[:i]...)
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
func (pl *Pull) takeWithPlaces(ctx context.Context, qs []*Queue, n int, wait bool) []*lease {
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
