package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

func TestTaskUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"task", "get", "jobs"}, "want a queue and a task ID"},
		{[]string{"task", "get", "jobs", "a b"}, "invalid task ID"},
		{[]string{"task", "get", "onceq-x", "a"}, "reserved queue name"},
		{[]string{"task", "wait", "jobs", "a", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"task", "list"}, "want one queue name"},
		{[]string{"task", "list", "jobs", "--state", "done"}, `--state: onceq: task state "done"`},
		{[]string{"task", "list", "jobs", "--limit", "0"}, "--limit 0: want 1 to 10000"},
		{[]string{"task", "list", "jobs", "--since", "-1h"}, "--since -1h0m0s"},
		{[]string{"produce", "--queue", "jobs", "--unique", "x"}, "--unique: missing --id"},
		{[]string{"produce", "--queue", "jobs", "--id", "a", "--unique", "--tx", "x"}, "--unique and --tx"},
		{[]string{"produce", "--file", "-", "--unique"}, "--unique submits one task"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// TestTaskCommands runs a worker process whose flaky: handler fails a task
// twice before it succeeds, and one that always fails, and asks about them
// with task wait, get and list.
func TestTaskCommands(t *testing.T) {
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, "out", 2)
	w := testutil.Start(t, "worker", "--brokers", addr, "--queue", "jobs", "--handler", "flaky:out", "--checkpoint-dir", t.TempDir(),
		"--metrics-addr", "", "--max-attempts", "3", "--backoff-base", "100ms", "--backoff-factor", "1", "--backoff-max", "100ms", "--buckets", "100ms,1s")
	defer w.Kill()
	w.WaitOutput(t, "worker started", 30*time.Second) // it made the records topic
	for _, args := range [][]string{
		{"produce", "--queue", "jobs", "--id", "flaky-1", "--header", "fail=2", "--priority", "7", "hello"},
		{"produce", "--queue", "jobs", "--id", "doomed-1", "--header", "fail=always", "hello"},
	} {
		if code, _, stderr := runCLI(t, "", append([]string{"--brokers", addr}, args...)...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
	}
	code, out, stderr := runCLI(t, "", "--brokers", addr, "task", "wait", "jobs", "flaky-1", "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "state     succeeded") || !strings.Contains(out, "attempt   3") || !strings.Contains(out, "priority  7\n") ||
		!strings.Contains(out, `result    {"runs":1,"attempt":3}`) {
		t.Fatalf("task wait flaky-1: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "task", "wait", "jobs", "doomed-1", "--timeout", "60s")
	if code != exitFailure || !strings.Contains(out, "state     dead") || !strings.Contains(out, "reason    max_attempts") || strings.Contains(out, "priority") {
		t.Fatalf("task wait doomed-1: exit %d\n%s", code, out)
	}
	// A --timeout too short for the view to load says so, in words.
	code, _, stderr = runCLI(t, "", "--brokers", addr, "queue", "stats", "jobs", "--timeout", "1ms")
	if code != exitFailure || !strings.Contains(stderr, "timed out after 1ms (--timeout; raise it to wait longer)") {
		t.Fatalf("queue stats --timeout 1ms: exit %d: %s", code, stderr)
	}
	// Its two failed attempts, each with its error.
	code, out, _ = runCLI(t, "", "--brokers", addr, "task", "get", "jobs", "flaky-1")
	if code != 0 || !strings.Contains(out, "failed attempts\n  1  ") || !strings.Contains(out, "\n  2  ") || strings.Count(out, "flaky: task flaky-1 fails attempt") != 2 {
		t.Fatalf("task get of a task that failed twice: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "task", "get", "jobs", "flaky-1", "--json")
	if code != 0 || !strings.HasPrefix(out, `{"v":1,"id":"flaky-1","queue":"jobs","state":"succeeded"`) || !strings.Contains(out, `,"priority":7,`) {
		t.Fatalf("task get --json: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "task", "list", "jobs", "--state", "dead,succeeded")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(out, "doomed-1") || !strings.Contains(out, "flaky-1") {
		t.Fatalf("task list: exit %d\n%s", code, out)
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "flaky-1", "--unique", "again")
	if code != 0 || out != "flaky-1 known succeeded\n" {
		t.Fatalf("produce --unique of a finished task: exit %d: %q%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "produce", "--queue", "jobs", "--id", "fresh-1", "--unique", "--delay", "1h", "later")
	if code != 0 || !strings.HasPrefix(out, "fresh-1 new onceq-delay-") {
		t.Fatalf("produce --unique of a new ID: exit %d: %q%s", code, out, stderr)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "task", "get", "jobs", "fresh-1")
	if code != 0 || !strings.Contains(out, "state     scheduled") {
		t.Fatalf("task get of a task produce --unique submitted: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "queue", "stats", "jobs")
	if code != 0 || !strings.Contains(out, "due: overdue=0 within-1m=0 within-1h=1 within-1d=1") || !strings.Contains(out, "unfinished by priority: 0=1\n") {
		t.Fatalf("queue stats with a task due in an hour: exit %d\n%s", code, out)
	}
	code, _, stderr = runCLI(t, "", "--brokers", addr, "task", "get", "jobs", "never-submitted")
	if code != exitFailure || !strings.Contains(stderr, "no record of the task") {
		t.Fatalf("task get of an unknown ID: exit %d: %s", code, stderr)
	}
	start := time.Now()
	code, _, stderr = runCLI(t, "", "--brokers", addr, "task", "wait", "jobs", "never-submitted", "--timeout", "1s")
	if code != exitFailure || !strings.Contains(stderr, "not done after 1s") || time.Since(start) > 10*time.Second {
		t.Fatalf("task wait past its timeout: exit %d: %s", code, stderr)
	}
}

// TestCancelAndPauseCommands: task cancel of a delayed task makes it end
// canceled; a cancel of an unknown ID writes nothing and exits 1, naming
// --ahead, which cancels the task waiting unrecorded (--records=false); a cancel of a
// finished task exits 1; queue pause holds a queue's tasks until queue
// resume; queue list shows both.
func TestCancelAndPauseCommands(t *testing.T) {
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, "out", 2)
	cli := cliOn(t, addr)
	cli("queue", "pause", "jobs")
	w := testutil.Start(t, "worker", "--brokers", addr, "--queue", "jobs", "--handler", "count:out", "--checkpoint-dir", t.TempDir(),
		"--metrics-addr", "", "--buckets", "100ms,1s")
	defer w.Kill()
	w.WaitOutput(t, "queue paused", 30*time.Second)
	cli("produce", "--queue", "jobs", "--id", "now-1", "hello")
	cli("produce", "--queue", "jobs", "--id", "later-1", "--delay", "3s", "--unique", "hello")
	if out := cli("task", "cancel", "jobs", "later-1", "--wait", "0"); !strings.Contains(out, "canceled task later-1 of jobs: it ends canceled") {
		t.Fatalf("task cancel: %s", out)
	}
	// Recorded from its submission: canceled as it is.
	cli("produce", "--queue", "jobs", "--id", "later-2", "--delay", "3s", "hello")
	if out := cli("task", "cancel", "jobs", "later-2", "--wait", "0"); !strings.Contains(out, "canceled task later-2 of jobs: it ends canceled") {
		t.Fatalf("task cancel of a task produced without --unique: %s", out)
	}
	// Without a record (--records=false): unknown, unless --ahead.
	cli("produce", "--queue", "jobs", "--id", "later-3", "--delay", "3s", "--records=false", "hello")
	code, out, stderr := runCLI(t, "", "--brokers", addr, "task", "cancel", "jobs", "later-3")
	if code != exitFailure || !strings.Contains(stderr, "no record of it") || !strings.Contains(stderr, "--ahead") {
		t.Fatalf("task cancel of a task without a record: exit %d: %s%s", code, out, stderr)
	}
	if out := cli("task", "cancel", "jobs", "later-3", "--ahead"); !strings.Contains(out, "canceled task later-3 of jobs ahead") {
		t.Fatalf("task cancel --ahead: %s", out)
	}
	time.Sleep(time.Second)
	if out := cli("queue", "list"); !strings.Contains(out, "jobs   true") {
		t.Fatalf("queue list while paused:\n%s", out)
	}
	if recs, _ := testutil.ReadCommittedErr(conn, 5*time.Second, "out"); len(recs) > 0 {
		t.Fatalf("%d tasks ran while the queue was paused", len(recs))
	}
	cli("queue", "resume", "jobs")
	if out := cli("task", "wait", "jobs", "now-1", "--timeout", "30s"); !strings.Contains(out, "state     succeeded") {
		t.Fatalf("now-1 after resume:\n%s", out)
	}
	for _, id := range []string{"later-1", "later-2", "later-3"} {
		code, out, _ := runCLI(t, "", "--brokers", addr, "task", "wait", "jobs", id, "--timeout", "30s")
		if code != exitFailure || !strings.Contains(out, "state     canceled") {
			t.Fatalf("%s: exit %d\n%s", id, code, out)
		}
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "task", "cancel", "jobs", "now-1")
	if code != exitFailure || !strings.Contains(stderr, "already succeeded: nothing to cancel") {
		t.Fatalf("cancel of a finished task: exit %d: %s%s", code, out, stderr)
	}
	if out := cli("queue", "list"); !strings.Contains(out, "jobs   false") {
		t.Fatalf("queue list after resume:\n%s", out)
	}
	out = cli("queue", "stats", "jobs", "--json")
	if !strings.Contains(out, `"queue":"jobs","paused":false,"tasks":{"canceled":3,"succeeded":1}`) ||
		!strings.Contains(out, `"group":"onceq","state":"Stable","members":1,"waiting":`) {
		t.Fatalf("queue stats --json:\n%s", out)
	}
}

// TestTaskVisibleBeforeAnyWorker: with no worker running, a task just
// produced is known: task get shows the immediate one pending and the
// delayed one scheduled, queue stats counts both, and task cancel of the
// delayed one succeeds (exit 0). A worker started afterwards runs the
// first and never the second.
func TestTaskVisibleBeforeAnyWorker(t *testing.T) {
	addr, conn := produceBroker(t)
	testutil.CreateTopic(t, conn, "out", 2)
	cli := cliOn(t, addr)
	cli("produce", "--queue", "jobs", "--id", "now-1", "hello")
	cli("produce", "--queue", "jobs", "--id", "later-1", "--delay", "2s", "hello")
	if out := cli("task", "get", "jobs", "now-1"); !strings.Contains(out, "state     pending") {
		t.Fatalf("task get of an immediate task before any worker:\n%s", out)
	}
	if out := cli("task", "get", "jobs", "later-1"); !strings.Contains(out, "state     scheduled") || !strings.Contains(out, "due ") {
		t.Fatalf("task get of a delayed task before any worker:\n%s", out)
	}
	if out := cli("queue", "stats", "jobs", "--json"); !strings.Contains(out, `"tasks":{"pending":1,"scheduled":1}`) {
		t.Fatalf("queue stats before any worker:\n%s", out)
	}
	if out := cli("task", "cancel", "jobs", "later-1", "--wait", "0"); !strings.Contains(out, "canceled task later-1 of jobs: it ends canceled") {
		t.Fatalf("task cancel of a delayed task before any worker: %s", out)
	}
	w := testutil.Start(t, "worker", "--brokers", addr, "--queue", "jobs", "--handler", "count:out", "--checkpoint-dir", t.TempDir(),
		"--metrics-addr", "", "--buckets", "100ms,1s")
	defer w.Kill()
	if out := cli("task", "wait", "jobs", "now-1", "--timeout", "30s"); !strings.Contains(out, "state     succeeded") {
		t.Fatalf("now-1 once a worker runs:\n%s", out)
	}
	code, out, stderr := runCLI(t, "", "--brokers", addr, "task", "wait", "jobs", "later-1", "--timeout", "30s")
	if code != exitFailure || !strings.Contains(out, "state     canceled") {
		t.Fatalf("later-1 once a worker runs: exit %d\n%s%s", code, out, stderr)
	}
	ran := map[string]int{}
	for id := range readJobs(t, conn, "out") {
		ran[id]++
	}
	if len(ran) != 1 || ran["now-1"] != 1 {
		t.Fatalf("the handler's outputs by key: %v; want now-1 once and later-1 never", ran)
	}
}

// TestViewCache: the task commands keep their view of the records in the
// view cache, one directory per cluster, and read on from it: a task
// submitted since the last command is there, and so is the one before.
// A command that finds the cache held by another reads afresh; --view-cache
// off keeps none; an unwritable --view-cache is a usage error.
func TestViewCache(t *testing.T) {
	addr, _ := produceBroker(t)
	cache := filepath.Join(t.TempDir(), "views")
	cli := cliOn(t, addr)
	cli("produce", "--queue", "jobs", "--id", "a-1", "hello")
	if out := cli("--view-cache", cache, "task", "get", "jobs", "a-1"); !strings.Contains(out, "state     pending") {
		t.Fatalf("task get a-1:\n%s", out)
	}
	views, err := os.ReadDir(cache)
	if err != nil || len(views) != 1 {
		t.Fatalf("the view cache holds %v (%v); want one view, of this cluster", views, err)
	}
	if files, err := os.ReadDir(filepath.Join(cache, views[0].Name())); err != nil || len(files) == 0 {
		t.Fatalf("the view's directory holds %v (%v); want its store", files, err)
	}
	cli("produce", "--queue", "jobs", "--id", "b-1", "hello")
	if out := cli("--view-cache", cache, "task", "list", "jobs"); !strings.Contains(out, "a-1") || !strings.Contains(out, "b-1") {
		t.Fatalf("task list from the cached view:\n%s", out)
	}
	// A wait holds the cache: a command beside it reads afresh.
	waiting := make(chan string, 1)
	go func() {
		_, out, stderr := runCLI(t, "", "--brokers", addr, "--view-cache", cache, "task", "wait", "jobs", "a-1", "--timeout", "3s")
		waiting <- out + stderr
	}()
	for range 20 {
		if out := cli("--view-cache", cache, "task", "get", "jobs", "b-1"); !strings.Contains(out, "state     pending") {
			t.Fatalf("task get b-1 beside a wait:\n%s", out)
		}
	}
	if out := <-waiting; !strings.Contains(out, "not done after 3s") {
		t.Fatalf("the wait beside: %s", out)
	}
	off := filepath.Join(t.TempDir(), "unused")
	t.Setenv("XDG_CACHE_HOME", off)
	if out := cli("--view-cache", "off", "task", "get", "jobs", "a-1"); !strings.Contains(out, "state     pending") {
		t.Fatalf("task get with --view-cache off:\n%s", out)
	}
	if _, err := os.Stat(off); !os.IsNotExist(err) {
		t.Fatalf("--view-cache off made a cache: %v", err)
	}
	if code, _, stderr := runCLI(t, "", "--brokers", addr, "--view-cache", "/proc/onceq", "task", "get", "jobs", "a-1"); code != exitUsage || !strings.Contains(stderr, "--view-cache /proc/onceq") {
		t.Fatalf("an unwritable --view-cache: exit %d: %s", code, stderr)
	}
}
