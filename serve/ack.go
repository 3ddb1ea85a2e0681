package serve

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/onceq/onceq"
)

// ackOutcome is what an acknowledgment came to.
type ackOutcome int

const (
	// ackNotLeased: the lease topic has no lease of the task: it was never
	// handed out (or its acknowledgment committed long ago).
	ackNotLeased ackOutcome = iota
	// ackDone: the task committed succeeded with its result.
	ackDone
	// ackLater: the acknowledgment counted after the lease's time-to-run
	// passed; the task completes with its result when it runs again.
	ackLater
)

// ackFetchAfter is how long an acknowledgment of a task no handler of
// this server runs waits for its commit before it has the task's queue
// fetched: the handler running it, on another server, commits it sooner;
// a run that no handler holds (its server stopped, its partition moved)
// must be fetched to commit.
const ackFetchAfter = time.Second

// acknowledge acknowledges a task handed out to a consumer, through the
// lease topic, from whichever server the consumer reached: the worker
// running the task (on this server or another) commits it with result,
// and acknowledge returns once that commit is visible. lease, if not
// empty, is the lease the consumer holds: an acknowledgment of another
// consumer's lease is refused (409).
func (s *Server) acknowledge(ctx context.Context, topic, id, lease string, result []byte) (ackOutcome, error) {
	lg := s.pull.ledger
	key := leaseKey(topic, id)
	st, ok := lg.state(key)
	if !ok || lease != "" && lease != st.Lease {
		// Every event written before now is known before the answer
		// says none or another lease; the write below decides the rest.
		if err := lg.barrier(ctx); err != nil {
			return 0, err
		}
		if st, ok = lg.state(key); !ok {
			return ackNotLeased, nil
		}
	}
	// A run held here needs no fetch to commit (awaitCommit); one held
	// now may end before the acknowledgment counts, but then because its
	// time-to-run passed, and it is a late one.
	held := s.pull.running(key)
	if !st.Acked {
		if lease != "" && lease != st.Lease {
			return 0, &apiError{status: http.StatusConflict, field: "lease", msg: "the job was handed out again, to another consumer, after this lease's time-to-run passed: it is that consumer's to acknowledge"}
		}
		counted, now, err := lg.write(ctx, key, leaseEvent{Kind: evAck, Lease: lease, Result: result})
		if err != nil {
			return 0, err
		}
		if !counted && !now.Acked {
			return 0, &apiError{status: http.StatusConflict, field: "lease", msg: "the job was handed out again, to another consumer, after this lease's time-to-run passed: it is that consumer's to acknowledge"}
		}
		// Acknowledged, by this request or another first: an ACK is
		// idempotent, and the first result counts.
	}
	// The record of the run that was taken, or of a later run: a task
	// requeued from the dead letters left a final record of its own.
	rec, err := s.awaitCommit(ctx, topic, id, held, func(r onceq.TaskRecord) bool {
		return r.State.Final() && (r.Partition != st.Partition || r.Offset >= st.Offset)
	})
	switch {
	case err != nil && st.Expired && ctx.Err() == nil:
		return ackLater, nil
	case err != nil:
		return 0, &apiError{status: http.StatusGatewayTimeout, msg: fmt.Sprintf("acknowledged, but its commit is not visible after %v: ask GET .../job/%s", ackCommitWait, id)}
	case rec.State != onceq.StateSucceeded:
		return 0, &apiError{status: http.StatusConflict, msg: fmt.Sprintf("the task ended %s: %s (its time-to-run passed and it ran out of tries, or it was canceled)", rec.State, rec.Error)}
	}
	lg.forget(key)
	return ackDone, nil
}

// awaitCommit waits, up to ackCommitWait, for the record of topic's task
// id that final accepts. A run not held here (held) has its queue fetched
// if it did not commit within ackFetchAfter, here or on the server that
// owns its partition, so that it runs again: a queue no consumer waits
// for is not fetched for an acknowledgment its run takes without.
func (s *Server) awaitCommit(ctx context.Context, topic, id string, held bool, final func(onceq.TaskRecord) bool) (onceq.TaskRecord, error) {
	wctx, cancel := context.WithTimeout(ctx, ackCommitWait)
	defer cancel()
	if !held {
		fctx, cancel := context.WithTimeout(wctx, ackFetchAfter)
		rec, err := s.in.WaitFor(fctx, topic, id, final)
		cancel()
		if err == nil || wctx.Err() != nil || fctx.Err() == nil {
			return rec, err
		}
		until, _ := wctx.Deadline()
		s.pull.wantRemote(topic, until)
		s.pull.announce(topic, until, true)
	}
	return s.in.WaitFor(wctx, topic, id, final)
}
