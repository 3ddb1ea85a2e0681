package bench

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

func TestParseSlow(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Slow
	}{
		{"1%:1s", Slow{Percent: 1, Duration: time.Second}},
		{"0.5%:250ms", Slow{Percent: 0.5, Duration: 250 * time.Millisecond}},
		{"100%:20s", Slow{Percent: 100, Duration: MaxWork}},
		{"12.5%:0s", Slow{Percent: 12.5}},
		{"0%:0s", Slow{}},
		{"0%:1s", Slow{Duration: time.Second}},
		{"none", Slow{}},
		{"", Slow{}},
	} {
		got, err := ParseSlow(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSlow(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"1", "want P%:D"},
		{"1%", "want P%:D"},
		{"1:1s", "want P%:D"},
		{"1s", "want P%:D"},
		{"%:1s", `percentage "" is not a number`},
		{"x%:1s", `percentage "x" is not a number`},
		{"1%:", `duration "" is not a duration`},
		{"1%:x", `duration "x" is not a duration`},
		{"1%:1s:2s", `duration "1s:2s" is not a duration`},
		{"1%%:1s", `percentage "1%" is not a number`},
		{" 1%:1s", `percentage " 1" is not a number`},
		{"-1%:1s", "percentage -1: want 0 to 100"},
		{"101%:1s", "percentage 101: want 0 to 100"},
		{"NaN%:1s", "percentage NaN: want 0 to 100"},
		{"Inf%:1s", "percentage +Inf: want 0 to 100"},
		{"1%:-1s", "duration -1s: want 0 to 20s"},
		{"1%:21s", "duration 21s: want 0 to 20s"},
	} {
		_, err := ParseSlow(tc.in)
		if err == nil {
			t.Errorf("ParseSlow(%q) accepted", tc.in)
			continue
		}
		for _, want := range []string{"bench: slow ", tc.want, "for example 1%:1s"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ParseSlow(%q): %q lacks %q", tc.in, err, want)
			}
		}
	}
}

func TestParseSlowRoundTrip(t *testing.T) {
	for _, s := range []Slow{{}, {Percent: 1, Duration: time.Second}, {Percent: 0.125, Duration: 1500 * time.Microsecond}, {Percent: 100}} {
		back, err := ParseSlow(s.String())
		if err != nil || back != s {
			t.Errorf("%+v: String %q reads back as %+v, %v", s, s.String(), back, err)
		}
	}
}

func TestParseWork(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "0s": 0, "20ms": 20 * time.Millisecond, "1.5s": 1500 * time.Millisecond, "20s": MaxWork} {
		if got, err := ParseWork(in); err != nil || got != want {
			t.Errorf("ParseWork(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "20", "fast", "-1ms", "21s", "1h"} {
		_, err := ParseWork(in)
		if err == nil {
			t.Errorf("ParseWork(%q) accepted", in)
			continue
		}
		if !strings.HasPrefix(err.Error(), "bench: work ") || !strings.Contains(err.Error(), "for example 20ms") {
			t.Errorf("ParseWork(%q): %q does not name the work or give an example", in, err)
		}
	}
}

// TestProfileOptions: the profile applies to the scenarios whose handlers
// run in the bench, and Run checks it whoever built the options.
func TestProfileOptions(t *testing.T) {
	slow := Slow{Percent: 1, Duration: time.Second}
	for _, sc := range ProfileScenarios {
		o, err := Options{Scenario: sc, Work: 20 * time.Millisecond, Slow: slow}.withDefaults()
		if err != nil || o.Work != 20*time.Millisecond || o.Slow != slow {
			t.Errorf("%s: %+v, %v", sc, o, err)
		}
		if o, err := (Options{Scenario: sc}).withDefaults(); err != nil || o.Work != DefaultWork || o.Slow != (Slow{}) {
			t.Errorf("%s defaults: work %v, slow %v, %v", sc, o.Work, o.Slow, err)
		}
	}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Scenario: Produce, Work: time.Millisecond}, "the produce scenario runs no handler"},
		{Options{Scenario: Delay, Slow: slow}, "the delay scenario runs no handler"},
		{Options{Scenario: Chaos, Binary: "/bin/sh", Slow: slow}, `chaos runs the count: handler in "onceq worker" processes`},
		{Options{Scenario: E2E, Work: -time.Millisecond}, "work -1ms: want a duration from 0 to 20s"},
		{Options{Scenario: E2E, Work: time.Minute}, "work 1m0s: want a duration from 0 to 20s"},
		{Options{Scenario: Process, Slow: Slow{Percent: 150, Duration: time.Second}}, "percentage 150: want 0 to 100"},
		{Options{Scenario: Process, Slow: Slow{Percent: 1, Duration: -time.Second}}, "duration -1s: want 0 to 20s"},
	} {
		_, err := tc.o.withDefaults()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s, work %v, slow %v: %v; want ErrConfig and %q", tc.o.Scenario, tc.o.Work, tc.o.Slow, err, tc.want)
		}
	}
}

func TestSlowTasks(t *testing.T) {
	for _, tc := range []struct {
		percent float64
		n, want int
	}{
		{0, 1000, 0},
		{1, 2000, 20},
		{1, 10_000, 100},
		{0.01, 10, 1}, // at least one when asked for any
		{33.3, 10, 3},
		{100, 7, 7},
	} {
		if got := (Slow{Percent: tc.percent, Duration: time.Second}).tasks(tc.n); got != tc.want {
			t.Errorf("%v%% of %d: %d slow tasks, want %d", tc.percent, tc.n, got, tc.want)
		}
	}
}

func profileLoad(t *testing.T, seed uint64, tasks int, work time.Duration, slow Slow) *load {
	t.Helper()
	o, err := Options{Scenario: E2E, Tasks: tasks, Duplicates: 0.1, Seed: seed, Work: work, Slow: slow}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newLoad(&o, "bench-x-", rand.New(rand.NewPCG(seed, 1)))
}

// TestSlowTasksFollowTheSeed: the slow tasks are exactly the share asked
// for, picked by the seed alone, so the exactly-once run and its
// at-least-once baseline (one load) and a replay (a new load of the same
// seed) sleep on the same tasks, and the rest of the load is the one the
// seed makes without a profile.
func TestSlowTasksFollowTheSeed(t *testing.T) {
	slow := Slow{Percent: 1, Duration: time.Second}
	a := profileLoad(t, 7, 2000, 20*time.Millisecond, slow)
	b := profileLoad(t, 7, 2000, 20*time.Millisecond, slow)
	c := profileLoad(t, 8, 2000, 20*time.Millisecond, slow)
	plain := profileLoad(t, 7, 2000, 0, Slow{})
	if !slices.Equal(a.slow, b.slow) {
		t.Fatal("one seed picked different slow tasks")
	}
	if slices.Equal(a.slow, c.slow) {
		t.Fatal("seeds 7 and 8 picked the same slow tasks")
	}
	if !slices.Equal(a.order, plain.order) || !bytes.Equal(a.filler, plain.filler) {
		t.Fatal("a profile changed the load of its seed")
	}
	n := 0
	for i, s := range a.slow {
		want := 20 * time.Millisecond
		if s {
			n++
			want = time.Second
		}
		if got := a.workFor(a.id(int32(i))); got != want {
			t.Fatalf("task %d (slow %v) works %v, want %v", i, s, got, want)
		}
	}
	if n != 20 || a.slowTasks != 20 {
		t.Fatalf("%d slow tasks marked, %d counted; want 20 (1%% of 2000)", n, a.slowTasks)
	}
	if a.longestWork() != time.Second || plain.longestWork() != 0 || plain.workFor(plain.id(3)) != 0 {
		t.Fatalf("longest work %v and %v", a.longestWork(), plain.longestWork())
	}
	if fast := profileLoad(t, 7, 100, time.Second, Slow{Percent: 50}); fast.longestWork() != time.Second || fast.slowTasks != 50 {
		t.Fatalf("half the tasks fast: longest %v, %d slow", fast.longestWork(), fast.slowTasks)
	}
}

// TestHandlerWorkHonoursContext: a handler run sleeping its work returns
// the context's error, and emits nothing, when the context ends first.
func TestHandlerWorkHonoursContext(t *testing.T) {
	w := &workers{m: startMeter()}
	defer w.m.finish()
	h := w.handler("out", true, newRecorder(), func(string) time.Duration { return time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	task := &consumer.Task{Task: onceq.Task{ID: "a", Payload: make([]byte, MinSize)}}
	if err := h.Handle(ctx, task); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("handler returned %v; want the context's error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the handler slept %v past its context", took)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Handle(canceled, task); !errors.Is(err, context.Canceled) {
		t.Fatalf("handler returned %v; want context.Canceled", err)
	}
	if !w.lastFinish().IsZero() {
		t.Fatal("a canceled run counted as finished")
	}
}

func TestKeptUp(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name             string
		span, tail       time.Duration
		longest          time.Duration
		kept             bool
		allowed, tailSec float64
	}{
		{"short run, small tail", 4 * time.Second, 300 * time.Millisecond, 0, true, 1, 0.3},
		{"short run, 1s floor", 4 * time.Second, 1100 * time.Millisecond, 0, false, 1, 1.1},
		{"long run, 5% of the span", 40 * time.Second, 1900 * time.Millisecond, 0, true, 2, 1.9},
		{"long run, behind", 40 * time.Second, 5 * time.Second, 0, false, 2, 5},
		{"a slow task submitted last", 4 * time.Second, 1800 * time.Millisecond, time.Second, true, 2, 1.8},
		{"finished before the last acknowledgment", 4 * time.Second, -10 * time.Millisecond, 0, true, 1, 0},
	} {
		r := newRun("w", false, 2000, 100, tc.span+tc.tail)
		submitted := start.Add(tc.span)
		r.setPace(start, submitted, submitted.Add(tc.tail), tc.longest)
		if r.KeptUp == nil || *r.KeptUp != tc.kept || r.AllowedTailSeconds != tc.allowed || r.TailSeconds != tc.tailSec {
			t.Errorf("%s: kept up %v, tail %v of %v; want %v, %v of %v", tc.name, yesNo(r.KeptUp), r.TailSeconds, r.AllowedTailSeconds, tc.kept, tc.tailSec, tc.allowed)
		}
		if want := float64(int64(2000 / tc.span.Seconds())); r.OfferedPerSec != want {
			t.Errorf("%s: offered %v/s, want %v", tc.name, r.OfferedPerSec, want)
		}
	}
}

// TestReportKeptUp: an e2e report carries the profile and each run's
// verdict through JSON, and the table shows them.
func TestReportKeptUp(t *testing.T) {
	o, err := Options{Scenario: E2E, Tasks: 2000, Rate: 500, Seed: 42, Work: 20 * time.Millisecond, Slow: Slow{Percent: 1, Duration: time.Second}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(&o, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	start := r.Started
	eos := newRun(workerRunName(consumer.ExactlyOnce), false, 2000, o.Size, 4500*time.Millisecond)
	eos.setPace(start, start.Add(4*time.Second), start.Add(4400*time.Millisecond), 2*time.Second)
	alo := newRun(workerRunName(consumer.AtLeastOnce), true, 2000, o.Size, 12*time.Second)
	alo.setPace(start, start.Add(4*time.Second), start.Add(12*time.Second), 2*time.Second)
	r.Runs = []RunResult{eos, alo}
	r.finish(time.Now())
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"kept_up": true`, `"kept_up": false`, `"offered_per_sec": 500`, `"tail_seconds": 8`, `"allowed_tail_seconds": 3`,
		`"work": "20ms"`, `"slow": "1%:1s"`, `"slow_tasks": 20`} {
		if !strings.Contains(buf.String(), field) {
			t.Errorf("JSON lacks %s", field)
		}
	}
	back, err := ReadReport(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip changed the report:\n%+v\n%+v", back, r)
	}
	var tab bytes.Buffer
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rate 500/s, work 20ms, slow 1%:1s (20 tasks)", "kept up\n", "onceq worker exactly-once: kept up: offered 500/s, achieved 444/s; the last task finished 0.40s after the last submission (allowed 3.00s)",
		"onceq worker at-least-once: fell behind: offered 500/s, achieved 166/s; the last task finished 8.00s after the last submission (allowed 3.00s)"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	if lines := strings.Split(tab.String(), "\n"); !strings.HasSuffix(strings.TrimSpace(lines[4]), "yes") || !strings.HasSuffix(strings.TrimSpace(lines[5]), "no") {
		t.Errorf("the kept up column:\n%s", tab.String())
	}
	var plain bytes.Buffer
	if err := sampleReport(t).WriteTable(&plain); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "kept up") || strings.Contains(plain.String(), "work ") {
		t.Errorf("a delay report shows a profile or a kept up column:\n%s", plain.String())
	}
}
