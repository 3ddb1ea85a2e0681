package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/periodic"
)

// TestPeriodicCommands: periodic add stores a schedule and says when it
// fires next, list shows it (as a table and as JSON), remove deletes it;
// every bad flag exits 2 naming it, and writes nothing.
func TestPeriodicCommands(t *testing.T) {
	addr, conn := produceBroker(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add"}, "want one schedule name"},
		{[]string{"add", "a b", "--queue", "jobs", "--every", "1m"}, `schedule name "a b": byte 1 is ' '`},
		{[]string{"add", "x", "--every", "1m"}, "--queue: name the queue the ticks' tasks go to"},
		{[]string{"add", "x", "--queue", "onceq-x", "--every", "1m"}, `--queue "onceq-x": reserved queue name`},
		{[]string{"add", "x", "--queue", "jobs"}, "give --every D (an interval such as 30s or 1h) or --cron SPEC"},
		{[]string{"add", "x", "--queue", "jobs", "--every", "1m", "--cron", "* * * * *"}, "--every and --cron: give one of them"},
		{[]string{"add", "x", "--queue", "jobs", "--every", "1500ms"}, "--every 1.5s: want a whole number of seconds from 1s to 366 days"},
		{[]string{"add", "x", "--queue", "jobs", "--every", "0s"}, "--every: give an interval such as 1m"},
		{[]string{"add", "x", "--queue", "jobs", "--every", "soon"}, `invalid argument "soon" for "--every"`},
		{[]string{"add", "x", "--queue", "jobs", "--cron", "0 9 * *"}, `--cron "0 9 * *": want 5 fields`},
		{[]string{"add", "x", "--queue", "jobs", "--cron", "@every 1m"}, "give the interval as Every (--every)"},
		{[]string{"add", "x", "--queue", "jobs", "--cron", "0 9 * * *", "--tz", "Mars/Base"}, `--tz "Mars/Base": want an IANA time zone name`},
		{[]string{"add", "x", "--queue", "jobs", "--every", "1m", "--tz", "Europe/Paris"}, `--tz "Europe/Paris": a time zone applies to a cron spec only`},
		{[]string{"add", "x", "--queue", "jobs", "--every", "1m", "--catch-up", "--skip-missed"}, "--catch-up and --skip-missed: give one of them"},
		{[]string{"add", "x", "--queue", "jobs", "--every", "1m", "--max-attempts", "-1"}, "--max-attempts -1: want 0 (the worker's default) or 1 to"},
		{[]string{"add", "x", "--queue", "jobs", "--every", "1m", "--task-timeout", "1500us"}, "--task-timeout 1.5ms: want 0"},
		{[]string{"add", "x", "--queue", "jobs", "--every", "1m", "--payload", strings.Repeat("p", 300<<10)}, "--payload: 307200 bytes: at most 262144"},
		{[]string{"add", "x", "--queue", "jobs", "--every", "1m", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"add", "x", "--queue", "a b", "--every", "1500ms", "--max-attempts", "-1"}, "--queue \"a b\": invalid queue name: use letters, digits, '.', '_' or '-'\n--every 1.5s"},
		{[]string{"remove", "a/b"}, `schedule name "a/b"`},
		{[]string{"remove"}, "want one schedule name"},
		{[]string{"list", "extra"}, "want no arguments"},
		{[]string{"run", "--lead", "10ms"}, "--lead 10ms: want 100ms to 1h0m0s"},
		{[]string{"run", "--max-catch-up", "0"}, "--max-catch-up 0: want 1 or more"},
		{[]string{"run", "--buckets", "0s"}, "--buckets"},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"--brokers", addr, "periodic"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq periodic %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, cutLong(stderr), tc.want)
		}
	}
	if recs := testutil.ReadCommitted(t, conn, 10*time.Second, periodic.Topic); len(recs) != 0 {
		t.Fatalf("bad input wrote %d schedule records", len(recs))
	}

	code, out, stderr := runCLI(t, "", "--brokers", addr, "periodic", "add", "beat", "--queue", "jobs", "--every", "1h")
	if code != 0 || !strings.HasPrefix(out, "added beat: every 1h0m0s, next ") || !strings.Contains(out, ":00:00Z (task ID beat@") {
		t.Fatalf("periodic add: exit %d: %q %s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "", "--brokers", addr, "periodic", "add", "report", "--queue", "jobs", "--cron", "0 9 * * 1-5",
		"--tz", "Europe/Paris", "--payload", `{"kind":"sales"}`, "--skip-missed", "--max-attempts", "3", "--task-timeout", "90s")
	if code != 0 || !strings.HasPrefix(out, "added report: cron 0 9 * * 1-5 Europe/Paris, next ") || !strings.Contains(out, "T09:00:00+0") {
		t.Fatalf("periodic add --cron: exit %d: %q %s", code, out, stderr)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "periodic", "add", "beat", "--queue", "jobs", "--every", "1h")
	if code != 0 || !strings.HasPrefix(out, "replaced beat: every 1h0m0s, next ") {
		t.Fatalf("periodic add of an existing name: exit %d: %q", code, out)
	}
	if code, _, stderr = runCLI(t, "", "--brokers", addr, "periodic", "add", "lost", "--queue", "nowhere", "--every", "1m"); code != exitFailure ||
		!strings.Contains(stderr, `queue "nowhere" does not exist: create it with 'onceq topics create nowhere'`) {
		t.Fatalf("periodic add to a missing queue: exit %d: %s", code, stderr)
	}

	code, out, _ = runCLI(t, "", "--brokers", addr, "periodic", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.Contains(lines[1], "beat") || !strings.Contains(lines[1], "every 1h0m0s") || !strings.Contains(lines[1], "catch-up") ||
		!strings.Contains(lines[2], "report") || !strings.Contains(lines[2], "cron 0 9 * * 1-5 Europe/Paris") || !strings.Contains(lines[2], "skip") {
		t.Fatalf("periodic list: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "--brokers", addr, "periodic", "list", "--json")
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("periodic list --json: %q: %v", line, err)
		}
		got = append(got, m)
	}
	if code != 0 || len(got) != 2 || got[0]["every"] != "1h0m0s" || got[1]["cron"] != "0 9 * * 1-5" || got[1]["tz"] != "Europe/Paris" ||
		got[1]["payload"] != `{"kind":"sales"}` || got[1]["max_attempts"] != 3.0 || got[1]["timeout"] != "1m30s" || got[1]["missed"] != "skip" ||
		got[0]["next"] == nil || got[0]["last"] != nil {
		t.Fatalf("periodic list --json: exit %d\n%s", code, out)
	}

	if code, out, stderr = runCLI(t, "", "--brokers", addr, "periodic", "remove", "beat"); code != 0 || out != "removed beat\n" {
		t.Fatalf("periodic remove: exit %d: %q %s", code, out, stderr)
	}
	if code, out, _ = runCLI(t, "", "--brokers", addr, "periodic", "list"); code != 0 || strings.Contains(out, "beat") || !strings.Contains(out, "report") {
		t.Fatalf("periodic list after remove: exit %d\n%s", code, out)
	}
	if code, _, stderr = runCLI(t, "", "--brokers", addr, "periodic", "remove", "beat"); code != exitFailure || !strings.Contains(stderr, "no schedule of this name") {
		t.Fatalf("removing a removed schedule: exit %d: %s", code, stderr)
	}
}

func cutLong(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
