package handlers

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

// TestSleepHeader: the count: and flaky: handlers sleep for a task's
// "sleep" header before their work, a canceled context ends the sleep and
// fails the run with the context's error, and a value that is not a
// duration of 0 or more fails the task without retry, naming the header.
func TestSleepHeader(t *testing.T) {
	task := func(sleep string) *consumer.Task {
		return &consumer.Task{Task: onceq.Task{ID: "t1", Headers: []onceq.Header{{Key: SleepHeader, Value: []byte(sleep)}}}}
	}
	for _, spec := range []string{"count:out", "flaky:out"} {
		h, _, err := Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"soon", "-1s", "1500", ""} {
			err := h.Handle(context.Background(), task(bad))
			if !consumer.IsSkipRetry(err) || !strings.Contains(err.Error(), `header "sleep"`) {
				t.Errorf("%s, sleep %q: %v; want a SkipRetry error naming the header", spec, bad, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		err = h.Handle(ctx, task("1h"))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || consumer.IsSkipRetry(err) || time.Since(start) > 5*time.Second {
			t.Errorf("%s, sleep 1h, context ended after 50ms: %v after %v; want the context's error at once", spec, err, time.Since(start))
		}
	}

	var ran time.Duration
	start := time.Now()
	h := sleepy(consumer.HandlerFunc(func(context.Context, *consumer.Task) error {
		ran = time.Since(start)
		return nil
	}))
	if err := h.Handle(context.Background(), task("150ms")); err != nil || ran < 150*time.Millisecond {
		t.Fatalf("sleep 150ms: %v, the work ran after %v", err, ran)
	}
	start = time.Now()
	if err := h.Handle(context.Background(), &consumer.Task{Task: onceq.Task{ID: "t2"}}); err != nil || ran > 100*time.Millisecond {
		t.Fatalf("no sleep header: %v, the work ran after %v", err, ran)
	}
}

// TestParseErrors: every bad spec is a *SpecError that matches ErrSpec and
// says what is wrong.
func TestParseErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"noop:x":       "noop takes no argument",
		"copy:":        "queue",
		"count:a b":    "invalid queue name",
		"exec: ":       "give a command",
		"http:ftp://x": "want http:URL",
		"nope":         "unknown kind",
	} {
		_, _, err := Parse(spec)
		var se *SpecError
		if !errors.Is(err, ErrSpec) || !errors.As(err, &se) || se.Spec != spec || !strings.Contains(se.Reason, want) {
			t.Errorf("Parse(%q): %v; want a SpecError matching ErrSpec saying %q", spec, err, want)
		}
	}
}

// TestParseRetryAfter: delay seconds and HTTP dates, a date in the past
// is no wait, and anything else is no answer.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"0":   0,
		"120": 2 * time.Minute,
		now.Add(time.Hour).Format(http.TimeFormat):  time.Hour,
		now.Add(-time.Hour).Format(http.TimeFormat): 0,
	} {
		if d, ok := parseRetryAfter(v, now); !ok || d != want {
			t.Errorf("Retry-After %q: %v %v; want %v", v, d, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "soon", "1.5"} {
		if d, ok := parseRetryAfter(v, now); ok {
			t.Errorf("Retry-After %q: %v; want no answer", v, d)
		}
	}
}

// TestTailBuffer: a failed command's error keeps the end of its stderr.
func TestTailBuffer(t *testing.T) {
	var b tailBuffer
	b.Write([]byte(strings.Repeat("a", stderrTail)))
	b.Write([]byte("end"))
	if got := b.String(); len(got) != stderrTail || !strings.HasSuffix(got, "aend") {
		t.Fatalf("tail %d bytes ending %q; want %d ending in \"aend\"", len(got), got[len(got)-4:], stderrTail)
	}
}
