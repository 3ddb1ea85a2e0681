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
	// The run that commits it needs its partition fetched, here or on the
	// server that owns it, consumer or not.
	until := time.Now().Add(ackCommitWait)
	s.pull.wantRemote(topic, until)
	s.pull.announce(topic, until, true)
	wctx, cancel := context.WithTimeout(ctx, ackCommitWait)
	defer cancel()
	// The record of the run that was taken, or of a later run: a task
	// requeued from the dead letters left a final record of its own.
	rec, err := s.in.WaitFor(wctx, topic, id, func(r onceq.TaskRecord) bool {
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
