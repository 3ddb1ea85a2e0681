package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/periodic"
)

// TestPeriodicCrash is issue 22's periodic acceptance: three "onceq
// worker" processes, each running a scheduler, and a schedule of every
// second for 60 s (20 s with -short; ONCEQ_PERIODIC_SECONDS sets it), one
// worker SIGKILLed halfway and restarted at once. Every tick from the
// first to the last ran exactly once (one output, its run counter 1), none
// before its tick, none missing, although every scheduler submitted every
// tick. The lateness of the ticks (handler start - tick) is logged.
func TestPeriodicCrash(t *testing.T) {
	periodicCrash(t, "ticks", 60)
}

// TestPeriodicCrashOnLane is TestPeriodicCrash over 20 s with the schedule
// ticking into lane queue ticks/beat, on lane ticks.
func TestPeriodicCrashOnLane(t *testing.T) {
	periodicCrash(t, "ticks/beat", 20)
}

// periodicCrash runs TestPeriodicCrash for seconds (20 with -short) with
// a schedule of queue, on topic ticks.
func periodicCrash(t *testing.T, queue string, seconds int) {
	if testing.Short() {
		seconds = 20
	}
	if v := os.Getenv("ONCEQ_PERIODIC_SECONDS"); v != "" {
		var err error
		if seconds, err = strconv.Atoi(v); err != nil || seconds < 10 {
			t.Fatalf("ONCEQ_PERIODIC_SECONDS=%q: want a number of seconds, 10 or more", v)
		}
	}
	_, conn := testutil.StartBroker(t, "")
	addr := conn.Brokers[0]
	testutil.CreateTopic(t, conn, "ticks", 4)
	testutil.CreateTopic(t, conn, "ticks-out", 4)
	dir := t.TempDir()
	metrics := [3]string{testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)}
	start := func(i int) *testutil.Process {
		return testutil.Start(t, "worker", "--brokers", addr, "--group", "periodic", "--queue", queue, "--handler", "count:ticks-out",
			"--checkpoint-dir", filepath.Join(dir, fmt.Sprint("w", i)), "--metrics-addr", metrics[i], "--log-level", "warn")
	}
	var workers [3]*testutil.Process
	for i := range workers {
		workers[i] = start(i)
	}
	for i := range workers {
		waitReady(t, metrics[i], workers[i])
	}

	added := time.Now()
	if code, out, stderr := runCLI(t, "", "--brokers", addr, "periodic", "add", "beat", "--queue", queue, "--every", "1s"); code != 0 {
		t.Fatalf("periodic add: exit %d: %s %s", code, out, stderr)
	}
	time.Sleep(time.Duration(seconds) * time.Second / 2)
	killed := time.Now()
	workers[1].Signal(syscall.SIGKILL)
	if _, err := workers[1].Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	workers[1] = start(1)
	waitReady(t, metrics[1], workers[1])
	t.Logf("worker 1 SIGKILLed %v after the schedule was added, ready again %v later",
		killed.Sub(added).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	time.Sleep(time.Until(added.Add(time.Duration(seconds) * time.Second)))
	if code, out, stderr := runCLI(t, "", "--brokers", addr, "periodic", "remove", "beat"); code != 0 {
		t.Fatalf("periodic remove: exit %d: %s %s", code, out, stderr)
	}
	removed := time.Now()

	// The ticks submitted before the removal run at their ticks, at most
	// the lead after it; then the outputs stop growing. (A tick late by
	// more than the 10 s it waits would show as missing: a failure too.)
	type run struct {
		tick, started time.Time
		runs          string
	}
	var runs []run
	read := func() {
		runs = runs[:0]
		for _, r := range testutil.ReadCommitted(t, conn, 30*time.Second, "ticks-out") {
			task, err := onceq.FromRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			name, tick, ok := periodic.ParseTaskID(task.ID)
			if !ok || name != "beat" {
				t.Fatalf("output %q is no tick of beat", task.ID)
			}
			rn := run{tick: tick}
			for _, h := range task.Headers {
				switch h.Key {
				case handlers.RunsHeader:
					rn.runs = string(h.Value)
				case handlers.StartedHeader:
					ms, err := strconv.ParseInt(string(h.Value), 10, 64)
					if err != nil {
						t.Fatalf("output %s: started %q", task.ID, h.Value)
					}
					rn.started = time.UnixMilli(ms)
				}
			}
			runs = append(runs, rn)
		}
	}
	for n, steady, deadline := -1, time.Now(), removed.Add(60*time.Second); ; time.Sleep(500 * time.Millisecond) {
		read()
		if len(runs) != n {
			n, steady = len(runs), time.Now()
		}
		if time.Since(steady) > 10*time.Second && time.Since(removed) > periodic.DefaultLead+10*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outputs still growing 60s after the removal: %d", n)
		}
	}

	byTick := map[time.Time]int{}
	var lateness []time.Duration
	var first, last time.Time
	for _, r := range runs {
		byTick[r.tick]++
		if r.runs != "1" {
			t.Errorf("tick %s ran with run counter %q, want 1", r.tick.Format(time.RFC3339), r.runs)
		}
		if r.started.Before(r.tick) {
			t.Errorf("tick %s started early, at %s", r.tick.Format(time.RFC3339), r.started.Format(time.RFC3339Nano))
		}
		lateness = append(lateness, r.started.Sub(r.tick))
		if first.IsZero() || r.tick.Before(first) {
			first = r.tick
		}
		if r.tick.After(last) {
			last = r.tick
		}
	}
	missing := 0
	for tick := first; !tick.After(last); tick = tick.Add(time.Second) {
		switch byTick[tick] {
		case 0:
			missing++
			t.Errorf("tick %s never ran", tick.Format(time.RFC3339))
		case 1:
		default:
			t.Errorf("tick %s ran %d times", tick.Format(time.RFC3339), byTick[tick])
		}
	}
	if first.After(added.Add(10*time.Second)) || last.Before(removed.Add(-3*time.Second)) {
		t.Errorf("ticks from %s to %s; want them from the addition (%s) to the removal (%s)", first.Format(time.RFC3339),
			last.Format(time.RFC3339), added.Format(time.RFC3339Nano), removed.Format(time.RFC3339Nano))
	}
	submitted := testutil.ReadCommitted(t, conn, 30*time.Second, "ticks")
	for _, r := range submitted {
		if task, err := onceq.FromRecord(r); err != nil || task.Queue != queue {
			t.Fatalf("a tick submitted at offset %d is of queue %q (%v), want %q", r.Offset, task.Queue, err, queue)
		}
	}
	if len(submitted) < 2*len(byTick) {
		t.Errorf("%d submissions of %d ticks: want every tick submitted by the schedulers of the three workers, at least twice on average",
			len(submitted), len(byTick))
	}
	slices.Sort(lateness)
	pct := func(p float64) time.Duration { return lateness[int(p*float64(len(lateness)-1))] }
	t.Logf("%d ticks from %s to %s, %d runs, %d missing, %d submissions; lateness (handler start - tick) p50 %v, p99 %v, max %v",
		len(byTick), first.Format(time.RFC3339), last.Format(time.RFC3339), len(runs), missing, len(submitted),
		pct(0.5), pct(0.99), lateness[len(lateness)-1])
}

// waitReady waits until the process answers 200 on /readyz.
func waitReady(t testing.TB, addr string, p *testutil.Process) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("not ready on %s within 60s:\n%s", addr, p.Output())
		}
	}
}
