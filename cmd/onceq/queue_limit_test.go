package main

import (
	"strings"
	"testing"
)

// TestQueueLimitCommands: queue limit sets a queue's limit, replaces it
// and lifts it, and queue limits lists what is set; bad flags exit 2
// with what to give instead, and write nothing.
func TestQueueLimitCommands(t *testing.T) {
	addr, _ := produceBroker(t)
	cli := cliOn(t, addr)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs"}, "give --rate, --running, or both"},
		{[]string{"jobs", "--clear", "--rate", "1/s"}, "--clear lifts the whole limit: give it alone"},
		{[]string{"jobs", "--rate", "10"}, "want <count>/<unit>, such as 10/s"},
		{[]string{"jobs", "--rate", "10/fortnight"}, "want s, m, h or a duration"},
		{[]string{"jobs", "--rate", "0/s"}, "from 1 to"},
		{[]string{"jobs", "--running", "0"}, "want 1 or more tasks running at once"},
		{[]string{"jobs/", "--running", "1"}, "label"},
		{[]string{"--running", "1"}, "one queue name"},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"--brokers", addr, "queue", "limit"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("queue limit %v: exit %d: %s; want exit %d saying %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	if out := cli("queue", "limits"); strings.Count(out, "\n") != 1 {
		t.Fatalf("bad flags wrote a limit: %s", out)
	}
	if out := cli("queue", "limit", "jobs", "--rate", "10/s", "--running", "5"); !strings.Contains(out, "jobs: limit rate 10/s, running 5") {
		t.Fatalf("queue limit: %s", out)
	}
	cli("queue", "limit", "emails", "--rate", "600/m")
	if got, want := rows(cli("queue", "limits")), "QUEUE RATE RUNNING RUNNING NOW|emails 600/m - 0|jobs 10/s 5 0"; got != want {
		t.Fatalf("queue limits: %q; want %q", got, want)
	}
	cli("queue", "limit", "jobs", "--running", "2") // replaces the rate too
	cli("queue", "limit", "emails", "--clear")
	if got, want := rows(cli("queue", "limits")), "QUEUE RATE RUNNING RUNNING NOW|jobs - 2 0"; got != want {
		t.Fatalf("queue limits after a change and a lift: %q; want %q", got, want)
	}
}

// rows is a table's lines, their cells one space apart, joined by '|'.
func rows(table string) string {
	var out []string
	for l := range strings.Lines(table) {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(out, "|")
}
