package consumer

import (
	"errors"
	"time"
)

// SkipRetry marks err as final: the task is not run again but goes to its
// queue's dead letters (onceq-dlq-<queue>) with the error. It still matches
// after wrapping: fmt.Errorf("...: %w", consumer.SkipRetry(err)) works.
func SkipRetry(err error) error {
	if err == nil {
		err = errors.New("skip retry")
	}
	return &skipRetry{err}
}

type skipRetry struct{ err error }

func (e *skipRetry) Error() string { return e.err.Error() }
func (e *skipRetry) Unwrap() error { return e.err }

// RetryAfter asks for the task to run again no sooner than d from now,
// instead of after its backoff. The worker caps d at the longest backoff
// (the task's onceq-backoff max, or the worker's Backoff max; see
// CapRetryDelay), so a handler, or the server behind it with its
// Retry-After, cannot park a task for longer than a retry may wait. It
// still matches after wrapping.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry after " + d.String())
	}
	return &retryAfter{d: d, err: err}
}

type retryAfter struct {
	d   time.Duration
	err error
}

func (e *retryAfter) Error() string { return e.err.Error() }
func (e *retryAfter) Unwrap() error { return e.err }

// IsSkipRetry reports whether err, or an error it wraps, came from
// SkipRetry.
func IsSkipRetry(err error) bool {
	var s *skipRetry
	return errors.As(err, &s)
}

// RetryDelay returns the delay a RetryAfter error in err's chain asks for,
// as asked: not capped (see CapRetryDelay).
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryAfter
	if errors.As(err, &r) {
		return r.d, true
	}
	return 0, false
}

// CapRetryDelay bounds a delay asked for with RetryAfter to what a retry
// may wait: from zero to max, the longest backoff (the task's
// onceq-backoff max, or the worker's Backoff max). A max of zero or less
// leaves d uncapped, but never negative.
func CapRetryDelay(d, max time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	if max > 0 && d > max {
		return max
	}
	return d
}

// Snooze asks for the task to run again after d without counting an
// attempt, as River's JobSnooze does: for a handler that waits for
// something (a dependency, a resource) rather than failing. The retry is
// scheduled like one (through the delay buckets, in the transaction of
// this run), with its attempt and max attempts both one more, so a
// snoozed task never runs out of attempts; its task record is scheduled,
// with why in its error and the result the run set, if any. d is capped
// like RetryAfter's. It still matches after wrapping.
func Snooze(d time.Duration, why string) error {
	if why == "" {
		why = "snoozed for " + d.String()
	}
	return &snooze{d: d, why: why}
}

type snooze struct {
	d   time.Duration
	why string
}

func (e *snooze) Error() string { return e.why }

// Release gives the task back to its queue as it came, to run again
// after d (0: at once, behind what its partition holds now): for a
// handler that got a task it cannot serve now, and that has not tried it
// (onceq serve's pull worker releases a task no HTTP consumer asked for).
// Unlike Snooze, the run counts for nothing: the task's next run has its
// attempt and max attempts, no processed-ID mark is left (a first attempt
// stays its ID's first), and what the run set (state writes, emitted
// tasks, a result) is dropped. Its task record is left as it was, or is
// scheduled until the task is due again when d is above 0. The task is
// written back in the transaction of this run's offset, so it goes back
// exactly once. A negative d is 0. It still matches after wrapping.
//
// A released task goes behind the records its partition holds, so it may
// run after later tasks of its key.
func Release(d time.Duration, why string) error {
	if why == "" {
		why = "released"
	}
	return &release{d: max(d, 0), why: why}
}

type release struct {
	d   time.Duration
	why string
}

func (e *release) Error() string { return e.why }

// released returns the delay a Release error in err's chain asks for.
func released(err error) (time.Duration, bool) {
	var r *release
	if errors.As(err, &r) {
		return r.d, true
	}
	return 0, false
}

// snoozed returns the delay a Snooze error in err's chain asks for.
func snoozed(err error) (time.Duration, bool) {
	var s *snooze
	if errors.As(err, &s) {
		return s.d, true
	}
	return 0, false
}
