package consumer_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
)

// TestCapRetryDelay pins issue 17, bug 10: a Retry-After of three years
// parked a task for three years, past --backoff-max. A delay asked for is
// bounded by the longest backoff, and never negative.
func TestCapRetryDelay(t *testing.T) {
	const year = 365 * 24 * time.Hour
	err := fmt.Errorf("http: 503: %w", consumer.RetryAfter(3*year, errors.New("busy")))
	d, ok := consumer.RetryDelay(err)
	if !ok || d != 3*year {
		t.Fatalf("RetryDelay: %v, %v: want the delay as asked", d, ok)
	}
	for _, tc := range []struct{ d, max, want time.Duration }{
		{3 * year, time.Hour, time.Hour},
		{time.Minute, time.Hour, time.Minute},
		{time.Hour, time.Hour, time.Hour},
		{-time.Second, time.Hour, 0},
		{3 * year, 0, 3 * year},
		{-time.Second, 0, 0},
	} {
		if got := consumer.CapRetryDelay(tc.d, tc.max); got != tc.want {
			t.Errorf("CapRetryDelay(%v, %v) = %v, want %v", tc.d, tc.max, got, tc.want)
		}
	}
}
