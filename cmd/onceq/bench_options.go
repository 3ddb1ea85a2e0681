package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/consumer"
)

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
		"lane-queues":     {bench.Chaos},
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
	case f.laneQueues < 0 || f.laneQueues > bench.MaxLaneQueues:
		return bench.Options{}, usagef("--lane-queues %d: want 0 to %d lane queues (0: the tasks are the queue's own)", f.laneQueues, bench.MaxLaneQueues)
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
		MaxDelay: f.maxDelay, KillBroker: f.killBroker, LaneQueues: f.laneQueues, KillInterval: f.killInterval, NoBaselines: !f.baselines,
		Binary: f.binary, Work: work, Slow: slow, Progress: bench.NewProgress(g.stderr, isTerminal(g.stderr)), Logger: g.log,
	}
	if changed("brokers") { // from the flag, ONCEQ_BROKERS or the config file
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
