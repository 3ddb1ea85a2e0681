package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// TestDemo runs "onceq demo" as a process, smaller than by default: every
// check must hold and be printed.
func TestDemo(t *testing.T) {
	p := testutil.Start(t, "demo", "--immediate", "300", "--delayed", "60", "--duplicates", "30", "--flaky", "20",
		"--doomed", "10", "--max-delay", "3s", "--chords", "5", "--chains", "5", "--dir", t.TempDir())
	code, err := p.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	out := p.Output()
	if code != 0 || strings.Contains(out, "FAIL") || strings.Count(out, "  ok   ") != 5 {
		t.Fatalf("demo exit %d:\n%s", code, out)
	}
	for _, want := range []string{"executed once: 460 distinct task IDs", "0 duplicated, 0 missing", "0 started before their due time",
		"20 of 20 tasks failed twice", "dead letters: 10 in onceq-dlq-demo-orders", "killed worker 2 with SIGKILL",
		"onceq task get demo-orders flaky-0):\ntask      flaky-0\nqueue     demo-orders\nstate     succeeded\nattempt   3\n",
		`result    {"runs":1,"attempt":3}`, "state     dead\nattempt   3\n",
		"workflows: 5 of 5 chords' callbacks ran once with all 10 results; 5 of 5 chains of 5 ran each step once, in order",
		"onceq workflow get chord-0):\nworkflow  chord-0\nstate     succeeded", "callback  task demo-orders/chord-0/cb", "reason    max_attempts\nerror     flaky: task doomed-0 fails always (attempt 3)"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--workers", "1"},
		{"demo", "--duplicates", "5000"},
		{"demo", "--max-delay", "10ms"},
		{"demo", "--immediate", "0"},
		{"demo", "--chain-steps", "1"},
		{"demo", "--chords", "-1"},
	} {
		if code, _, stderr := runCLI(t, "", args...); code != exitUsage {
			t.Errorf("onceq %s: exit %d (%s), want 2", strings.Join(args, " "), code, stderr)
		}
	}
}

// TestDemoRemovesItsDir: a demo without --dir removes the temporary dir
// it made once it stopped; with --keep it would stay.
func TestDemoRemovesItsDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p := testutil.Start(t, "demo", "--immediate", "50", "--delayed", "10", "--duplicates", "5", "--flaky", "5",
		"--doomed", "2", "--max-delay", "2s", "--chords", "1", "--chains", "1")
	code, err := p.Wait(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if out := p.Output(); code != 0 || !strings.Contains(out, "data and logs in "+tmp) {
		t.Fatalf("demo exit %d:\n%s", code, out)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "onceq-demo-") {
			t.Errorf("the demo left %s in %s", e.Name(), tmp)
		}
	}
}

// TestDemoOnCluster runs "onceq demo --brokers" twice on a three-node
// broker process whose partition leaders move every second: the demo
// starts no broker of its own, every check holds while leaders move, and
// the second run on the same cluster, with names of its own, checks only
// its own tasks.
func TestDemoOnCluster(t *testing.T) {
	_, addr := testutil.StartBrokerProcess(t, "127.0.0.1:0", "", "--nodes", "3", "--move-leaders-every", "1s")
	var queues []string
	for run := range 2 {
		// --timeout 3m: a classic group on the embedded broker sometimes
		// stalls for about a minute at a rebalance (see
		// TestCrashPausedWorker); the checks are what this test is about.
		dir := t.TempDir()
		p := testutil.Start(t, "demo", "--brokers", addr, "--replication-factor", "3", "--immediate", "200", "--delayed", "40",
			"--duplicates", "20", "--flaky", "10", "--doomed", "5", "--max-delay", "3s", "--chords", "3", "--chains", "3",
			"--timeout", "3m", "--dir", dir)
		code, err := p.Wait(4 * time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		out := p.Output()
		if code != 0 || strings.Contains(out, "FAIL") || strings.Count(out, "  ok   ") != 5 || strings.Contains(out, "embedded broker") {
			t.Fatalf("demo run %d on the cluster: exit %d:\n%s\nwarnings and errors of its workers:\n%s", run, code, out, logProblems(t, dir))
		}
		m := regexp.MustCompile(`onceq demo: brokers \S+, queue (demo-\S+-orders), group (demo-\S+),`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("demo run %d names no queue of its own:\n%s", run, out)
		}
		queues = append(queues, m[1])
		for _, want := range []string{"executed once: 298 distinct task IDs", "0 duplicated, 0 missing", "0 started before their due time",
			"dead letters: 5 in onceq-dlq-" + m[1], "workflows: 3 of 3 chords' callbacks ran once"} {
			if !strings.Contains(out, want) {
				t.Errorf("demo run %d output lacks %q:\n%s", run, want, out)
			}
		}
	}
	if queues[0] == queues[1] {
		t.Errorf("both runs used queue %s", queues[0])
	}
}

// logProblems returns the warnings and errors of the logs under dir, the
// last 30 of each log.
func logProblems(t *testing.T, dir string) string {
	var b strings.Builder
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		var lines []string
		for l := range strings.Lines(string(data)) {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				lines = append(lines, l)
			}
		}
		fmt.Fprintf(&b, "%s: %d\n%s", path, len(lines), strings.Join(lines[max(0, len(lines)-30):], ""))
		return nil
	})
	return b.String()
}
