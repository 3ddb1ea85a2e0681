package pull

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

// AckOutcome is what an acknowledgment came to.
type AckOutcome int

const (
	// AckNotLeased: the lease topic has no lease of the task: it was never
	// handed out (or its acknowledgment committed long ago).
	AckNotLeased AckOutcome = iota
	// AckDone: the task committed succeeded with its result.
	AckDone
	// AckLater: the acknowledgment counted after the lease's time-to-run
	// passed; the task completes with its result when it runs again.
	AckLater
	// AckFinal: the task was canceled while handed out: left as it is, as
	// an ACK is idempotent.
	AckFinal
)

// Records are the tasks' records that an acknowledgment waits on
// (inspect.Inspector's).
type Records interface {
	// Get returns the record of queue's task id.
	Get(ctx context.Context, queue, id string) (onceq.TaskRecord, error)
	// WaitFor waits until the record of queue's task id satisfies ok.
	WaitFor(ctx context.Context, queue, id string, ok func(onceq.TaskRecord) bool) (onceq.TaskRecord, error)
}

// ErrHandedOutAgain refuses an acknowledgment that names a lease which
// ended: the task was handed out again since.
var ErrHandedOutAgain = errors.New("the job was handed out again, to another consumer, after this lease's time-to-run passed: it is that consumer's to acknowledge")

// EndedError refuses an acknowledgment of a task that ended dead or
// expired before it: its result is not kept.
type EndedError struct {
	State  onceq.TaskState
	Reason string // the record's error
}

func (e *EndedError) Error() string {
	return fmt.Sprintf("the job ended %s before this acknowledgment (%s): its ttr passed and it ran out of tries; the result is not kept", e.State, e.Reason)
}

// CommitWaitError says that an acknowledgment counted, but the commit of
// task ID's run was not visible within Wait.
type CommitWaitError struct {
	ID   string
	Wait time.Duration
}

func (e *CommitWaitError) Error() string {
	return fmt.Sprintf("acknowledged, but its commit is not visible after %v: ask GET .../job/%s", e.Wait, e.ID)
}

// ackFetchAfter is how long an acknowledgment of a task no handler of
// this server runs waits for its commit before it has the task's queue
// fetched: the handler running it, on another server, commits it sooner;
// a run that no handler holds (its server stopped, its partition moved)
// must be fetched to commit.
const ackFetchAfter = time.Second

// AckRunWait is how long, once it had the queue fetched, an
// acknowledgment waits for the commit of a run no handler of this server
// holds before it returns AckLater: long enough for the partitions
// of a server that stopped to move (the pull group's session timeout) and
// its runs to start again on their new owner. A run may wait longer: its
// queue's places (Config.Slots) held by jobs offered to consumers, or the
// queue paused. The acknowledgment counted, so the run, when it comes,
// completes the task with its result; waiting for it would leave the
// consumer, whose next consume could free a place, waiting on itself.
// Tests shorten it (Config.AckRunWait).
const AckRunWait = consumer.DefaultSessionTimeout

// errRunWaits is what awaitCommit returns when the run it waits for did
// not commit within AckRunWait.
var errRunWaits = errors.New("the job's run did not commit: it completes with the acknowledged result when it runs")

// Acknowledge acknowledges a task handed out to a consumer, through the
// lease topic, from whichever server the consumer reached: the worker
// running the task (on this server or another) commits it with result,
// and Acknowledge returns once that commit is visible. lease, if not
// empty, is the lease the consumer holds: an acknowledgment of another
// consumer's lease is refused (ErrHandedOutAgain). An acknowledgment
// after the lease's time-to-run passed answers at once: the task's retry
// completes it when it comes (AckLater), and a task final by then stays
// so (ended).
func (pl *Pull) Acknowledge(ctx context.Context, topic, id, lease string, result []byte) (AckOutcome, error) {
	lg := pl.ledger
	if old := pl.legacyOf(topic); old != "" {
		// Handed out from the topic that held the queue's jobs before
		// the server had a lane (legacy.go)?
		if _, ok := lg.state(leaseKey(topic, id)); !ok {
			if _, ok := lg.state(leaseKey(old, id)); ok {
				topic = old
			}
		}
	}
	key := leaseKey(topic, id)
	st, ok := lg.state(key)
	if !ok || lease != "" && lease != st.Lease {
		// Every event written before now is known before the answer
		// says none or another lease; the write below decides the rest.
		if err := lg.barrier(ctx); err != nil {
			return 0, err
		}
		if st, ok = lg.state(key); !ok {
			return AckNotLeased, nil
		}
	}
	if !st.Taken && !st.Expired && !st.Acked {
		// Offered to another server's consumers (granted), or canceled:
		// never handed out.
		return AckNotLeased, nil
	}
	// A run held here needs no fetch to commit (awaitCommit); one held
	// now may end before the acknowledgment counts, but then because its
	// time-to-run passed, and it is a late one.
	held := pl.running(key)
	if !st.Acked {
		if lease != "" && lease != st.Lease {
			return 0, ErrHandedOutAgain
		}
		if err := expireDue(ctx, lg, key, st); err != nil {
			return 0, err
		}
		counted, now, err := lg.write(ctx, key, leaseEvent{Kind: evAck, Lease: lease, Result: result})
		if err != nil {
			return 0, err
		}
		if !counted && !now.Acked {
			return 0, ErrHandedOutAgain
		}
		// Acknowledged, by this request or another first: an ACK is
		// idempotent, and the first result counts.
		st = now
	}
	// The record of the run that was taken, or of a later run: a task
	// requeued from the dead letters left a final record of its own.
	final := func(r onceq.TaskRecord) bool {
		return r.State.Final() && (r.Partition != st.Partition || r.Offset >= st.Offset)
	}
	if ackedLate(st) {
		// The run it acknowledges failed when its time-to-run passed: no
		// commit of the result comes before the task's retry runs, after
		// its backoff, when its queue is next fetched; and none comes for
		// a task that was dead after that try.
		rec, err := pl.cfg.Records.Get(ctx, topic, id)
		if err != nil || !final(rec) {
			return AckLater, nil
		}
		return pl.ended(key, rec)
	}
	rec, err := pl.awaitCommit(ctx, topic, id, held, st.Runner, final)
	if errors.Is(err, errRunWaits) {
		return AckLater, nil
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return 0, err
	case err != nil:
		return 0, &CommitWaitError{ID: id, Wait: ackCommitWait}
	}
	return pl.ended(key, rec)
}

// ended answers an acknowledgment of a task whose run's record, rec, is
// final, and forgets its lease (a task requeued from the dead letters
// runs anew): done if it succeeded, with this result or an earlier
// acknowledgment's; final if it was canceled, which stands; refused
// (EndedError) if it is dead or expired: its time-to-run passed and it
// ran out of tries (or its ttl passed) before the acknowledgment, whose
// result is not kept, so that AckDone and AckFinal always mean the job
// succeeded or was canceled.
func (pl *Pull) ended(key string, rec onceq.TaskRecord) (AckOutcome, error) {
	pl.ledger.forget(key)
	switch rec.State {
	case onceq.StateSucceeded:
		return AckDone, nil
	case onceq.StateCanceled:
		return AckFinal, nil
	}
	return 0, &EndedError{State: rec.State, Reason: rec.Error}
}

// expireDue writes the expiry of st's lease, if it is open and its
// time-to-run passed by this server's clock, before an acknowledgment of
// it: the server whose handler holds the task writes it when the
// time-to-run ends, but a holder that stopped (killed, or its partitions
// moved) writes none until the task runs again, on whichever server
// takes its partition, which may be many seconds on. An acknowledgment
// counted before that would be one in time, and wait for that run to
// commit it; after the expiry it is a late one and answers at once (the
// run, when it comes, finds it and completes with its result). The
// expiry counts only while that lease is open, so a holder that wrote
// it first, or an acknowledgment that counted first, makes this one a
// no-op.
func expireDue(ctx context.Context, lg *ledger, key string, st leaseState) error {
	if !st.Taken || time.Now().Before(st.Until) {
		return nil
	}
	_, _, err := lg.write(ctx, key, leaseEvent{Kind: evExpire, Lease: st.Lease})
	return err
}

// ackedLate reports whether st's acknowledgment counted after the time-to-
// run of the lease it ends passed: the run taken is the one whose lease
// expired (a later run's take moves Partition and Offset past Ended).
func ackedLate(st leaseState) bool {
	return st.Acked && st.ExpireNonce != "" && st.Ended == (runRef{st.Partition, st.Offset})
}

// awaitCommit waits, up to ackCommitWait, for the record of topic's task
// id that final accepts. A run that did not commit within ackFetchAfter
// has its queue fetched, here or on the server that owns its partition,
// so that it runs again if it was dropped: a queue no consumer waits for
// is not fetched for an acknowledgment its run takes without. Then it
// returns errRunWaits for a run this server took and no longer holds
// (held), or waits, for a run of no known runner, AckRunWait more for
// that run's commit, or returns errRunWaits. A run that another server,
// runner, took is awaited by awaitRunner.
func (pl *Pull) awaitCommit(ctx context.Context, topic, id string, held bool, runner string, final func(onceq.TaskRecord) bool) (onceq.TaskRecord, error) {
	wctx, cancel := context.WithTimeout(ctx, ackCommitWait)
	defer cancel()
	until, _ := wctx.Deadline()
	if !held && runner != "" && runner != pl.ledger.id {
		return pl.awaitRunner(wctx, topic, id, runner, until, final)
	}
	fctx, fcancel := context.WithTimeout(wctx, ackFetchAfter)
	rec, err := pl.cfg.Records.WaitFor(fctx, topic, id, final)
	fcancel()
	if err == nil || wctx.Err() != nil || fctx.Err() == nil {
		return rec, err
	}
	pl.wantRemote(topic, until)
	pl.Announce(topic, until, true)
	if held {
		// A held run commits with the next commit that succeeds; one a
		// restart of the worker's Kafka session dropped (its commits
		// failed) runs again once its queue is fetched, as now.
		return pl.cfg.Records.WaitFor(wctx, topic, id, final)
	}
	if runner == pl.ledger.id {
		// This server took the run, and no handler of it held the run
		// when the acknowledgment came, nor did its commit come since:
		// it ended uncommitted (its partition moved, or the worker's
		// Kafka session restarted), and runs again on the partition's
		// owner, which fetches its queue now; as a probe of a runner
		// that no longer runs the task says (awaitRunner).
		if rec, err := pl.cfg.Records.Get(wctx, topic, id); err == nil && final(rec) {
			return rec, nil
		}
		return rec, errRunWaits
	}
	rctx, rcancel := context.WithTimeout(wctx, pl.cfg.AckRunWait)
	defer rcancel()
	rec, err = pl.cfg.Records.WaitFor(rctx, topic, id, final)
	if err != nil && rctx.Err() != nil && wctx.Err() == nil {
		return rec, errRunWaits
	}
	return rec, err
}

// awaitRunner waits, until wctx ends, for the commit of the run of
// topic's task id that server runner took. Each time ackProbeAfter passes
// without it, it probes runner (probe.go): unless runner answers that it
// runs the task still (it may die after an answer), the task runs again
// only once its partition's owner fetches its queue, and awaitRunner has
// the queue fetched and returns errRunWaits at once. A run not committed
// within ackFetchAfter has its queue fetched, and one not committed
// within AckRunWait more returns errRunWaits, as awaitCommit's do.
func (pl *Pull) awaitRunner(wctx context.Context, topic, id, runner string, until time.Time, final func(onceq.TaskRecord) bool) (onceq.TaskRecord, error) {
	began, fetched := time.Now(), false
	fetch := func() {
		if !fetched {
			pl.wantRemote(topic, until)
			pl.Announce(topic, until, true)
			fetched = true
		}
	}
	for {
		fctx, fcancel := context.WithTimeout(wctx, ackProbeAfter)
		rec, err := pl.cfg.Records.WaitFor(fctx, topic, id, final)
		fcancel()
		if err == nil || wctx.Err() != nil || fctx.Err() == nil {
			return rec, err
		}
		answered, runs, err := pl.ledger.ask(wctx, runner, leaseKey(topic, id), ackProbeWait)
		if err != nil {
			return rec, err
		}
		if !answered {
			// Dead: its partitions move at once if its pull worker is
			// (failover.go), and the run commits within about a second.
			pl.suspect()
		}
		if !runs {
			// The partition's owner, the next one if the runner is dead,
			// runs the task again, finds the acknowledgment and commits
			// its result; unless the run committed meanwhile.
			fetch()
			if rec, err := pl.cfg.Records.Get(wctx, topic, id); err == nil && final(rec) {
				return rec, nil
			}
			return rec, errRunWaits
		}
		switch waited := time.Since(began); {
		case waited >= ackFetchAfter+pl.cfg.AckRunWait:
			return rec, errRunWaits
		case waited >= ackFetchAfter:
			fetch()
		}
	}
}
