package consumer

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/dlq"
)

// TestEndingOf: how a handler's run ends its attempt, for each way it can
// return.
func TestEndingOf(t *testing.T) {
	failed := errors.New("failed")
	snooze := fmt.Errorf("waiting: %w", Snooze(time.Second, "later"))
	for _, tc := range []struct {
		name             string
		herr             error
		revoked, stopped bool
		attempt          int
		want             ending
	}{
		{name: "success", want: endSucceeded},
		{name: "success after a revoke and a cancel", revoked: true, stopped: true, want: endSucceeded},
		{name: "abandoned", herr: errTakenOver, revoked: true, stopped: true, want: endTakenOver},
		{name: "canceled at shutdown", herr: errCanceledRun, revoked: true, want: endShutdown},
		{name: "failed in a revoked partition", herr: failed, revoked: true, stopped: true, want: endRevoked},
		{name: "stopped by a cancel", herr: failed, stopped: true, want: endStopped},
		{name: "stopped while it snoozed", herr: snooze, stopped: true, want: endStopped},
		{name: "snoozed", herr: snooze, attempt: 3, want: endSnoozed},
		{name: "snoozed at the last attempt count", herr: snooze, attempt: onceq.MaxAttemptCount, want: endFailed},
		{name: "released", herr: fmt.Errorf("w: %w", Release(0, "")), attempt: 1, want: endReleased},
		{name: "released at the last attempt count", herr: Release(time.Second, ""), attempt: onceq.MaxAttemptCount, want: endReleased},
		{name: "stopped while it released", herr: Release(0, ""), stopped: true, want: endStopped},
		{name: "failed", herr: failed, attempt: 1, want: endFailed},
		{name: "skip retry", herr: SkipRetry(failed), attempt: 1, want: endFailed},
	} {
		if got := endingOf(tc.herr, tc.revoked, tc.stopped, tc.attempt); got != tc.want {
			t.Errorf("%s: ending %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestFailureVerdict: a failed run's retry or dead letter, with its
// delay: the backoff spread by the jitter, a RetryAfter capped at the
// backoff's max.
func TestFailureVerdict(t *testing.T) {
	b := onceq.Backoff{Base: time.Second, Factor: 2, Max: time.Minute}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name                 string
		herr                 error
		attempt, maxAttempts int
		jitter, rnd          float64
		want                 verdict
	}{
		{name: "first failure", herr: boom, attempt: 1, maxAttempts: 5, want: verdict{delay: time.Second}},
		{name: "third failure", herr: boom, attempt: 3, maxAttempts: 5, want: verdict{delay: 4 * time.Second}},
		{name: "jitter", herr: boom, attempt: 2, maxAttempts: 5, jitter: 0.2, rnd: 0.5, want: verdict{delay: 2200 * time.Millisecond}},
		{name: "backoff capped", herr: boom, attempt: 9, maxAttempts: 10, want: verdict{delay: time.Minute}},
		{name: "retry after", herr: RetryAfter(3*time.Second, boom), attempt: 1, maxAttempts: 5, jitter: 1, rnd: 0.9, want: verdict{delay: 3 * time.Second}},
		{name: "retry after capped", herr: RetryAfter(time.Hour, boom), attempt: 1, maxAttempts: 5, want: verdict{delay: time.Minute}},
		{name: "retry after negative", herr: RetryAfter(-time.Hour, boom), attempt: 1, maxAttempts: 5, want: verdict{}},
		{name: "last attempt", herr: boom, attempt: 5, maxAttempts: 5, want: verdict{reason: dlq.ReasonMaxAttempts, text: "attempt 5 of 5: boom"}},
		{name: "past the last attempt", herr: RetryAfter(time.Second, boom), attempt: 7, maxAttempts: 5, want: verdict{reason: dlq.ReasonMaxAttempts, text: "attempt 7 of 5: boom"}},
		{name: "skip retry", herr: fmt.Errorf("wrapped: %w", SkipRetry(boom)), attempt: 1, maxAttempts: 5, want: verdict{reason: dlq.ReasonFailed, text: "wrapped: boom"}},
		{name: "skip retry at the last attempt", herr: SkipRetry(boom), attempt: 5, maxAttempts: 5, want: verdict{reason: dlq.ReasonFailed, text: "boom"}},
	} {
		if got := failureVerdict(tc.herr, tc.attempt, tc.maxAttempts, b, tc.jitter, tc.rnd); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestSnoozePlan: a snooze's delay is capped like RetryAfter's, and its
// next run counts no attempt.
func TestSnoozePlan(t *testing.T) {
	b := onceq.Backoff{Base: time.Second, Factor: 2, Max: time.Minute}
	for _, tc := range []struct {
		d           time.Duration
		maxAttempts int
		wantD       time.Duration
		wantMax     int
	}{
		{d: 10 * time.Second, maxAttempts: 5, wantD: 10 * time.Second, wantMax: 6},
		{d: time.Hour, maxAttempts: 1, wantD: time.Minute, wantMax: 2},
		{d: -time.Second, maxAttempts: 5, wantD: 0, wantMax: 6},
		{d: time.Second, maxAttempts: onceq.MaxAttemptCount, wantD: time.Second, wantMax: onceq.MaxAttemptCount},
	} {
		if d, n := snoozePlan(tc.d, tc.maxAttempts, b); d != tc.wantD || n != tc.wantMax {
			t.Errorf("snoozePlan(%v, %d): %v, %d; want %v, %d", tc.d, tc.maxAttempts, d, n, tc.wantD, tc.wantMax)
		}
	}
}

// TestExpiryAndTimeToRun: a task expires strictly after its expiry time,
// and runs for its own time-to-run or the worker's.
func TestExpiryAndTimeToRun(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000000, time.UTC)
	for _, tc := range []struct {
		expires, now time.Time
		want         string
		expired      bool
	}{
		{now: at},
		{expires: at, now: at},
		{expires: at, now: at.Add(-time.Second)},
		{expires: at, now: at.Add(time.Nanosecond), want: "expired at 2030-01-02T03:04:05.006Z", expired: true},
		{expires: at.In(time.FixedZone("x", 3600)), now: at.Add(time.Hour), want: "expired at 2030-01-02T03:04:05.006Z", expired: true},
	} {
		text, expired := expiry(&onceq.Task{Expires: tc.expires}, tc.now)
		if text != tc.want || expired != tc.expired {
			t.Errorf("expires %v at %v: %q %v, want %q %v", tc.expires, tc.now, text, expired, tc.want, tc.expired)
		}
	}
	if d := timeToRun(&onceq.Task{}, time.Minute); d != time.Minute {
		t.Errorf("default time-to-run %v", d)
	}
	if d := timeToRun(&onceq.Task{Timeout: time.Second}, time.Minute); d != time.Second {
		t.Errorf("the task's own time-to-run: %v", d)
	}
}
