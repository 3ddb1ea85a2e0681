package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
)

type benchFlags struct {
	scenario       string
	tasks          int
	size           int
	partitions     int
	workers        int
	concurrency    int
	commitInterval time.Duration
	guarantee      string
	duplicates     float64
	rate           int
	seed           uint64
	jsonPath       string
	reportDir      string
	maxDelay       time.Duration
	killBroker     bool
	laneQueues     int
	killInterval   time.Duration
	baselines      bool
	binary         string
	work           string
	slow           string
}

// benchTestHook, when set by a test, adjusts the options before the run:
// the verification tests tamper with what the verifier reads.
var benchTestHook func(*bench.Options)

func newBenchCmd(g *globals) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput, latency and delay precision, and verify exactly-once independently",
		Long: `Run a benchmark scenario with its baselines, print a table and check the output
with a fresh read_committed reader: expected, unique, duplicates, missing (and
early, for delays). Exit 1 when the verification fails.

Scenarios (--scenario):
  produce  submit tasks with the producer; baseline: raw franz-go producing the
           same records
  process  drain a pre-loaded queue with --workers in-process workers;
           baselines: franz-go's GroupTransactSession copy loop and, for
           exactly-once, the at-least-once guarantee
  e2e      produce at --rate (0: flat out) while workers run the tasks;
           baseline: at-least-once
  delay    submit tasks due within --delay and run --workers delay services;
           reports lateness (publish minus due) and early tasks (must be 0)
  chaos    run --workers "onceq worker" processes (count: handler) and SIGKILL
           and restart them at random (--kill-interval), with --kill-broker the
           broker process too; duplicates and missing must be 0, and a run
           with fewer than 3 kills fails. Without --rate the tasks are
           submitted over 6 kill intervals, so the kills land while they flow;
           --lane-queues N spreads them over N lane queues of one lane

The handler-time profile (process and e2e) makes the bench's handlers work:
--work D sleeps D in every handler run before it emits its output, and
--slow P%:D makes P percent of the tasks (picked with --seed, the same in the
exactly-once run and its at-least-once baseline) sleep D instead. An e2e run
says whether its workers kept up with the offered rate: the last task must
finish within max(1s, 5% of the submission span) plus the longest sleep
after the last submission.

Without --brokers (flag or ONCEQ_BROKERS) the bench starts its own embedded
broker on a temporary data dir (for --kill-broker an "onceq broker" process).
Against your brokers it creates topics named bench-<random>-* and deletes them
at the end.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.scenario, "scenario", string(bench.E2E), "produce, process, e2e, delay or chaos")
	fl.IntVar(&f.tasks, "tasks", bench.DefaultTasks, "distinct tasks (task IDs)")
	fl.IntVar(&f.size, "size", bench.DefaultSize, fmt.Sprintf("payload bytes, %d to %d", bench.MinSize, bench.MaxSize))
	fl.IntVar(&f.partitions, "partitions", bench.DefaultPartitions, "partitions of the queues the bench creates")
	fl.IntVar(&f.workers, "workers", 0, "workers (in-process for process and e2e, delay services for delay, processes for chaos); 0: 3 for chaos, else 1")
	fl.IntVar(&f.concurrency, "concurrency", bench.DefaultConcurrency, "handlers in flight per worker")
	fl.DurationVar(&f.commitInterval, "commit-interval", bench.DefaultCommitInterval, "the workers' commit interval")
	fl.StringVar(&f.guarantee, "guarantee", string(consumer.ExactlyOnce), "exactly-once or at-least-once (process, e2e)")
	fl.Float64Var(&f.duplicates, "duplicates", 0, "fraction of the task IDs submitted a second time, 0 to 1")
	fl.IntVar(&f.rate, "rate", 0, "offered tasks per second for e2e, delay and chaos (0: flat out; chaos: over 6 kill intervals)")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the load and the chaos (0: from the clock; the report shows it)")
	fl.StringVar(&f.jsonPath, "json", "", "write the report as JSON to this file")
	fl.StringVar(&f.reportDir, "report", "", "write an HTML page with charts (index.html) and the JSON (report.json) to this directory")
	fl.DurationVar(&f.maxDelay, "delay", bench.DefaultMaxDelay, "delay scenario: delays are uniform from 0 to this")
	fl.IntVar(&f.laneQueues, "lane-queues", 0, fmt.Sprintf("chaos: spread the tasks over this many lane queues of the queue's topic (0 to %d; 0: the queue's own)", bench.MaxLaneQueues))
	fl.BoolVar(&f.killBroker, "kill-broker", false, "chaos: kill and restart the broker process too (needs the bench's own broker)")
	fl.DurationVar(&f.killInterval, "kill-interval", bench.DefaultKillInterval, "chaos: mean time between kills")
	fl.BoolVar(&f.baselines, "baselines", true, "run the baselines and print the ratios")
	fl.StringVar(&f.binary, "binary", "", "chaos: the onceq binary to run workers and the broker with (default: this one)")
	fl.StringVar(&f.work, "work", "0s", fmt.Sprintf("process, e2e: each handler run sleeps this before it emits its output, 0 to %v, for example 20ms", bench.MaxWork))
	fl.StringVar(&f.slow, "slow", "none", "process, e2e: P%:D, P percent of the tasks (picked with --seed) sleep D instead of --work, for example 1%:1s")
	return cmd
}

func runBench(cmd *cobra.Command, g *globals, f benchFlags) error {
	o, err := benchOptions(cmd, g, f)
	if err != nil {
		return err
	}
	if benchTestHook != nil {
		benchTestHook(&o)
	}
	rep, err := bench.Run(cmd.Context(), o)
	if errors.Is(err, bench.ErrConfig) || errors.Is(err, broker.ErrConfig) {
		return usageError{err}
	}
	if err != nil && cmd.Context().Err() != nil {
		return fmt.Errorf("bench interrupted: %w", err)
	}
	if err != nil {
		return err
	}
	if err := rep.WriteTable(g.stdout); err != nil {
		return err
	}
	if f.jsonPath != "" {
		if err := rep.WriteJSONFile(f.jsonPath); err != nil {
			return err
		}
	}
	if f.reportDir != "" {
		if err := writeBenchHTML(rep, f.reportDir); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "report: %s\n", filepath.Join(f.reportDir, "index.html"))
	}
	if !rep.OK {
		return fmt.Errorf("verification failed: %s", strings.Join(rep.Failures(), "; "))
	}
	return nil
}
