package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
           submitted over 6 kill intervals, so the kills land while they flow

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
		if err := rep.WriteHTML(f.reportDir); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "report: %s\n", filepath.Join(f.reportDir, "index.html"))
	}
	if !rep.OK {
		return fmt.Errorf("verification failed: %s", strings.Join(rep.Failures(), "; "))
	}
	return nil
}

// benchOptions checks the flags and maps them onto the bench's options.
func benchOptions(cmd *cobra.Command, g *globals, f benchFlags) (bench.Options, error) {
	sc, err := bench.ParseScenario(f.scenario)
	if err != nil {
		return bench.Options{}, usagef("--scenario %q: use produce, process, e2e, delay or chaos", f.scenario)
	}
	changed := cmd.Flags().Changed
	// Flags that mean nothing for the scenario are refused, not ignored.
	for flag, scenarios := range map[string][]bench.Scenario{
		"rate":            {bench.E2E, bench.Delay, bench.Chaos},
		"guarantee":       {bench.Process, bench.E2E, bench.Chaos},
		"workers":         {bench.Process, bench.E2E, bench.Delay, bench.Chaos},
		"concurrency":     {bench.Process, bench.E2E, bench.Chaos},
		"commit-interval": {bench.Process, bench.E2E, bench.Chaos},
		"delay":           {bench.Delay},
		"kill-broker":     {bench.Chaos},
		"kill-interval":   {bench.Chaos},
		"binary":          {bench.Chaos},
		"work":            bench.ProfileScenarios,
		"slow":            bench.ProfileScenarios,
	} {
		if changed(flag) && !slices.Contains(scenarios, sc) {
			return bench.Options{}, usagef("--%s does not apply to --scenario %s: it applies to %s", flag, sc, scenarioList(scenarios))
		}
	}
	work, err := bench.ParseWork(f.work)
	if err != nil {
		return bench.Options{}, usageError{fmt.Errorf("--work: %w", err)}
	}
	slow, err := bench.ParseSlow(f.slow)
	if err != nil {
		return bench.Options{}, usageError{fmt.Errorf("--slow: %w", err)}
	}
	guarantee, err := consumer.ParseGuarantee(f.guarantee)
	if err != nil {
		return bench.Options{}, usagef("--guarantee: %v", err)
	}
	switch {
	case f.tasks < 1 || f.tasks > bench.MaxTasks:
		return bench.Options{}, usagef("--tasks %d: want 1 to %d", f.tasks, bench.MaxTasks)
	case f.size < bench.MinSize || f.size > bench.MaxSize:
		return bench.Options{}, usagef("--size %d: want %d to %d bytes (the first %d carry the submission time)", f.size, bench.MinSize, bench.MaxSize, bench.MinSize)
	case f.partitions < 1 || f.partitions > 1000:
		return bench.Options{}, usagef("--partitions %d: want 1 to 1000", f.partitions)
	case f.workers < 0 || f.workers > 64:
		return bench.Options{}, usagef("--workers %d: want 1 to 64, or 0 for the scenario's default", f.workers)
	case f.concurrency < 1 || f.concurrency > 10_000:
		return bench.Options{}, usagef("--concurrency %d: want 1 to 10000", f.concurrency)
	case f.commitInterval < time.Millisecond || f.commitInterval > time.Minute:
		return bench.Options{}, usagef("--commit-interval %v: want 1ms to 1m", f.commitInterval)
	case !(f.duplicates >= 0 && f.duplicates <= 1):
		return bench.Options{}, usagef("--duplicates %v: want a fraction from 0 to 1, for example 0.05", f.duplicates)
	case f.rate < 0:
		return bench.Options{}, usagef("--rate %d: want 0 (flat out) or more tasks per second", f.rate)
	case f.maxDelay < time.Millisecond || f.maxDelay > time.Hour:
		return bench.Options{}, usagef("--delay %v: want 1ms to 1h", f.maxDelay)
	case f.killInterval < 100*time.Millisecond:
		return bench.Options{}, usagef("--kill-interval %v: want 100ms or more", f.killInterval)
	case sc == bench.Chaos && guarantee != consumer.ExactlyOnce:
		return bench.Options{}, usagef("--guarantee %s: chaos verifies exactly-once; its workers run exactly-once", guarantee)
	}
	if !changed("log-level") {
		// The components' info logs would drown the progress lines.
		g.logLevel = "warn"
		if err := g.setupLogger(); err != nil {
			return bench.Options{}, err
		}
	}
	o := bench.Options{
		Scenario: sc, Tasks: f.tasks, Size: f.size, Partitions: f.partitions, Workers: f.workers, Concurrency: f.concurrency,
		CommitInterval: f.commitInterval, Guarantee: guarantee, Duplicates: f.duplicates, Rate: f.rate, Seed: f.seed,
		MaxDelay: f.maxDelay, KillBroker: f.killBroker, KillInterval: f.killInterval, NoBaselines: !f.baselines,
		Binary: f.binary, Work: work, Slow: slow, Progress: bench.NewProgress(g.stderr, isTerminal(g.stderr)), Logger: g.log,
	}
	if changed("brokers") || os.Getenv("ONCEQ_BROKERS") != "" {
		if f.killBroker {
			return o, usagef("--kill-broker kills the bench's own broker: leave --brokers (and ONCEQ_BROKERS) unset")
		}
		if o.Conn, err = g.conn(); err != nil {
			return o, err
		}
	}
	if f.binary != "" {
		if fi, err := os.Stat(f.binary); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return o, usagef("--binary %q: not an executable: give the path of the onceq binary", f.binary)
		}
	}
	if f.jsonPath != "" {
		if fi, err := os.Stat(filepath.Dir(f.jsonPath)); err != nil || !fi.IsDir() {
			return o, usagef("--json %q: the directory %s does not exist", f.jsonPath, filepath.Dir(f.jsonPath))
		}
	}
	if f.reportDir != "" {
		if fi, err := os.Stat(f.reportDir); err == nil && !fi.IsDir() {
			return o, usagef("--report %q: not a directory", f.reportDir)
		}
	}
	return o, nil
}

// scenarioList names scenarios for a message: "process and e2e".
func scenarioList(scs []bench.Scenario) string {
	names := make([]string, len(scs))
	for i, sc := range scs {
		names[i] = string(sc)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
