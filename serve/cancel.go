package serve

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/serve/internal/pull"
)

// cancel: DELETE /api/{ns}/{queue}/job/{id}, lmstfy's ACK, answered 204
// as lmstfy's is, with what it did in the Onceq-Outcome header: a task
// handed out to a consumer is acknowledged with the body as its result
// ("acknowledged" once its commit is visible; "later" when it completes
// with the result when it runs again, its time-to-run passed); a task
// that has not started never starts ("canceled", while the cancel waits
// for a worker to end it canceled); a task already final, or unknown, is
// left as it is ("none": an ACK is idempotent). POST .../job/{id}/cancel
// (cancelJob) is onceq's cancel, which answers what it did.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	topic, id, err := s.jobOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	lease := r.URL.Query().Get("lease")
	if !pull.ValidLease(lease) {
		writeError(w, badRequest("lease", "%q: want the lease a consume answered with (letters A-Z and digits 2-7), or none", lease))
		return
	}
	// The body is the result of a task handed out; which it is, the lease
	// topic says once read to its end, in pull.Pull.Acknowledge.
	result, err := readBody(w, r, consumer.DefaultMaxResultBytes, "the server's result limit, consumer.DefaultMaxResultBytes")
	if err != nil {
		writeError(w, err) // the lease stays: acknowledge again with a smaller result
		return
	}
	outcome, err := s.finish(r, topic, id, lease, result)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set(outcomeHeader, outcome)
	w.WriteHeader(http.StatusNoContent)
}

// outcomeHeader says what a DELETE of a job did (cancel).
const outcomeHeader = "Onceq-Outcome"

// What a DELETE of a job did (finish).
const (
	outcomeAcked    = "acknowledged"
	outcomeLater    = "later"
	outcomeCanceled = "canceled"
	outcomeNone     = "none"
)

// finish ends a task as a DELETE does, and says what it did: it
// acknowledges it with result if it was handed out (outcomeAcked once
// committed; outcomeLater if it completes when it runs again), cancels it
// if it has not started (outcomeCanceled), and leaves it as it is if it
// is final or unknown (outcomeNone).
func (s *Server) finish(r *http.Request, topic, id, lease string, result []byte) (outcome string, err error) {
	switch out, err := s.pull.Acknowledge(r.Context(), topic, id, lease, result); {
	case err != nil:
		return "", ackError(err)
	case out == pull.AckDone:
		return outcomeAcked, nil
	case out == pull.AckFinal:
		return outcomeNone, nil
	case out == pull.AckLater:
		return outcomeLater, nil
	}
	canceled, err := s.cancelUntaken(r, topic, id)
	if errors.Is(err, errTakenFirst) {
		// Handed out before the cancel: the DELETE is its ACK.
		return s.finish(r, topic, id, lease, result)
	}
	if canceled {
		return outcomeCanceled, err
	}
	return outcomeNone, err
}

// ackError answers an acknowledgment's error: 409 for a lease that
// ended (lease) or a job that ended before it, 504 for a commit not
// visible in time.
func ackError(err error) error {
	var ended *pull.EndedError
	var wait *pull.CommitWaitError
	switch {
	case errors.Is(err, pull.ErrHandedOutAgain):
		return &apiError{status: http.StatusConflict, field: "lease", msg: err.Error()}
	case errors.As(err, &ended):
		return &apiError{status: http.StatusConflict, msg: err.Error()}
	case errors.As(err, &wait):
		return &apiError{status: http.StatusGatewayTimeout, msg: err.Error()}
	}
	return err
}

// errTakenFirst: a consumer took the task before the cancel of a DELETE
// counted.
var errTakenFirst = errors.New("handed out before the cancel")

// cancelUntaken cancels a task that was never handed out, unless it is
// final or unknown. Its cancel in the lease topic keeps every server from
// handing it out from then on, as the control topic's cancel reaches
// their workers later; if a take came first, it returns errTakenFirst.
func (s *Server) cancelUntaken(r *http.Request, topic, id string) (canceled bool, err error) {
	var opts []control.CancelOpt
	rec, err := s.in.Get(r.Context(), topic, id)
	switch {
	case err == nil && rec.State.Final():
		return false, nil
	case errors.Is(err, inspect.ErrNotFound) || errors.Is(err, inspect.ErrNoQueue):
		// No record yet: a task published without an ID waits in the
		// queue (or, delayed, in the delay buckets) without one until it
		// runs.
		ctx, cancel := context.WithTimeout(r.Context(), backlogWait)
		defer cancel()
		_, ok, err := s.waitingTask(ctx, topic, id, time.Time{})
		if err != nil {
			return false, backlogError(err)
		}
		if !ok {
			return false, nil
		}
		// It waits with no record: control.Cancel writes a cancel for
		// such a task only when asked to cancel ahead.
		opts = append(opts, control.CancelAhead())
	case err != nil:
		return false, err
	}
	switch handedOut, err := s.pull.CancelLease(r.Context(), topic, id); {
	case err != nil:
		return false, err
	case handedOut:
		return false, errTakenFirst
	}
	// Never handed out, and from now on never: its record ends canceled
	// at once, not pending (or overdue) until its queue's worker reaches it.
	opts = append(opts, control.CancelNotRunning())
	a, err := s.ctl.Cancel(r.Context(), topic, id, opts...)
	if err != nil {
		return false, lookupError(err)
	}
	switch a.Outcome {
	case control.CancelDone, control.CancelPending, control.CancelAheadOf:
		return true, nil
	}
	return false, nil // final by now, or finished first: nothing to cancel
}

// cancelJob: POST /api/{ns}/{queue}/job/{id}/cancel[?ahead=true]: the
// task is canceled (control.Cancel), a task handed out to a consumer
// included (its consumer's ACK then finds it canceled), and the status
// says what came of it:
//
//	200 canceled: it ended canceled (unrun, or running and it gave up)
//	202 pending: the cancel is recorded; it ends canceled when it reaches
//	    a worker (also a cancel ahead=true of a task without a record)
//	404 unknown: no record of the task: nothing written (ahead=true
//	    cancels it all the same)
//	409 final: already succeeded, dead, expired or canceled: nothing
//	    written
//	410 too late: it was running and finished before the cancel reached it
//
// The body is the job with its record (task), "cancel" (the outcome) and
// "message" (a sentence saying what happened).
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	topic, id, err := s.jobOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var opts []control.CancelOpt
	if v := r.URL.Query().Get("ahead"); v != "" {
		ahead, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, badRequest("ahead", "%q: want true or false", v))
			return
		}
		if ahead {
			opts = append(opts, control.CancelAhead())
		}
	}
	a, err := s.ctl.Cancel(r.Context(), topic, id, opts...)
	if err != nil {
		writeError(w, lookupError(err))
		return
	}
	msg := a.Describe(r.PathValue("queue"), id)
	if a.Outcome == control.CancelUnknown {
		writeError(w, &apiError{status: http.StatusNotFound, field: "id", msg: msg + "; ahead=true cancels it all the same, and a submission of it to come within the dedup window"})
		return
	}
	ans := job{Namespace: r.PathValue("ns"), Queue: r.PathValue("queue"), JobID: id, Cancel: a.Outcome, Message: msg}
	if a.Record.ID != "" {
		ans.Done, ans.Task = a.Record.State.Final(), a.Record.AppendJSON(nil)
	}
	writeJSON(w, cancelStatus[a.Outcome], ans)
}

// cancelStatus is the status of each answer of a cancel but unknown.
var cancelStatus = map[string]int{
	control.CancelDone:    http.StatusOK,
	control.CancelPending: http.StatusAccepted,
	control.CancelAheadOf: http.StatusAccepted,
	control.CancelFinal:   http.StatusConflict,
	control.CancelTooLate: http.StatusGone,
}
