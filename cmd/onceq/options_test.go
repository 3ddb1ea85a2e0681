package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/periodic"
)

// TestFlagDefaultsAreTheLibrarys pins every flag that sets a library
// option to the library's exported default, so the CLI and a program
// using the library start from the same settings.
func TestFlagDefaultsAreTheLibrarys(t *testing.T) {
	g := &globals{}
	worker, delayCmd, benchCmd, schedCmd := newWorkerCmd(g), newDelayCmd(g), newBenchCmd(g), newPeriodicRunCmd(g)
	for _, tc := range []struct {
		cmd  string
		flag string
		want any
	}{
		{"worker", "group", consumer.DefaultGroup},
		{"worker", "concurrency", consumer.DefaultConcurrency},
		{"worker", "commit-interval", consumer.DefaultCommitInterval},
		{"worker", "max-records-per-commit", consumer.DefaultMaxRecordsPerCommit},
		{"worker", "guarantee", consumer.DefaultGuarantee},
		{"worker", "shutdown-timeout", consumer.DefaultShutdownTimeout},
		{"worker", "timeout", consumer.DefaultTaskTimeout},
		{"worker", "dedup-window", consumer.DefaultDedupWindow},
		{"worker", "max-buffered", consumer.DefaultMaxBufferedRecords},
		{"worker", "priority-lookahead", consumer.DefaultPriorityLookahead},
		{"worker", "session-timeout", consumer.DefaultSessionTimeout},
		{"worker", "transaction-timeout", consumer.DefaultTransactionTimeout},
		{"worker", "retry-pause", consumer.DefaultRetryPause},
		{"worker", "max-attempts", consumer.DefaultMaxAttempts},
		{"worker", "backoff-base", consumer.DefaultBackoffBase},
		{"worker", "backoff-factor", consumer.DefaultBackoffFactor},
		{"worker", "backoff-max", consumer.DefaultBackoffMax},
		{"worker", "abandon-grace", consumer.DefaultAbandonGrace},
		{"worker", "quiet-after", consumer.DefaultQuietAfter},
		{"worker", "metrics-per-queue", consumer.DefaultMetricsPerQueue},
		{"worker", "task-records", consumer.DefaultTaskRecords},
		{"worker", "result-retention", consumer.DefaultResultRetention},
		{"worker", "max-result-bytes", consumer.DefaultMaxResultBytes},
		{"worker", "group-protocol", consumer.DefaultGroupProtocol},
		{"worker", "buckets", ""}, // the library has none: the cluster's ladder
		{"delay", "group", delay.DefaultGroup},
		{"delay", "commit-interval", delay.DefaultCommitInterval},
		{"delay", "max-held", delay.DefaultMaxHeld},
		{"delay", "session-timeout", delay.DefaultSessionTimeout},
		{"delay", "transaction-timeout", delay.DefaultTransactionTimeout},
		{"delay", "buckets", ""}, // the library has none: the cluster's ladder
		{"periodic run", "lead", periodic.DefaultLead},
		{"periodic run", "max-catch-up", periodic.DefaultMaxCatchUp},
		{"periodic run", "buckets", ""}, // the library has none: the cluster's ladder
		{"bench", "tasks", bench.DefaultTasks},
		{"bench", "size", bench.DefaultSize},
		{"bench", "partitions", bench.DefaultPartitions},
		{"bench", "concurrency", bench.DefaultConcurrency},
		{"bench", "commit-interval", bench.DefaultCommitInterval},
		{"bench", "delay", bench.DefaultMaxDelay},
		{"bench", "kill-interval", bench.DefaultKillInterval},
	} {
		cmd := map[string]*cobra.Command{"worker": worker, "delay": delayCmd, "bench": benchCmd, "periodic run": schedCmd}[tc.cmd]
		f := cmd.Flag(tc.flag)
		if f == nil {
			t.Errorf("onceq %s has no flag --%s", tc.cmd, tc.flag)
			continue
		}
		if want := fmt.Sprint(tc.want); f.DefValue != want {
			t.Errorf("onceq %s --%s defaults to %q, the library to %q", tc.cmd, tc.flag, f.DefValue, want)
		}
	}
}

// TestWorkerNamesEveryBadFlag checks that the worker reports all the
// options the library refused at once, each by the flag that sets it.
func TestWorkerNamesEveryBadFlag(t *testing.T) {
	code, _, stderr := runCLI(t, "", "worker", "--queue", "q", "--handler", "noop", "--checkpoint-dir", t.TempDir(),
		"--metrics-addr", "", "--concurrency", "0", "--commit-interval", "0s", "--timeout", "0s", "--backoff-factor", "0.5",
		"--transaction-timeout", "20s")
	for _, want := range []string{
		"--concurrency 0: want 1 or more",
		"--commit-interval 0s: want 1ms or more",
		"--timeout 0s: want more than 0",
		"--backoff-base/--backoff-factor/--backoff-max (base 1s, factor 0.5, max 1h0m0s): want whole milliseconds",
		"--transaction-timeout 20s: want 1s or more and below the session timeout (10s)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != exitUsage || strings.Contains(stderr, "Concurrency") {
		t.Errorf("exit %d, want %d, and no Go option names:\n%s", code, exitUsage, stderr)
	}
}

func TestKebab(t *testing.T) {
	for in, want := range map[string]string{
		"MaxRecordsPerCommit": "max-records-per-commit",
		"WithGuarantee":       "guarantee",
		"Group":               "group",
		"TxTimeout":           "tx-timeout",
	} {
		if got := kebab(in); got != want {
			t.Errorf("kebab(%q) = %q, want %q", in, got, want)
		}
	}
}
