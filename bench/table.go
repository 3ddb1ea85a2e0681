package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the report for people: the setup, one row per run,
// the ratios, and each verification.
func (r *Report) WriteTable(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "onceq bench: scenario %s, %d tasks (%d submissions, duplicates %g), %d B payloads, %d partitions, %d workers, concurrency %d, commit interval %s",
		r.Scenario, c.Tasks, c.Submissions, c.Duplicates, c.Size, c.Partitions, c.Workers, c.Concurrency, c.CommitInterval)
	if c.Rate > 0 {
		fmt.Fprintf(&b, ", rate %d/s", c.Rate)
	}
	if c.LaneQueues > 0 {
		fmt.Fprintf(&b, ", over %d lane queues", c.LaneQueues)
	}
	if c.MaxDelay != "" {
		fmt.Fprintf(&b, ", delays up to %s", c.MaxDelay)
	}
	if c.Work != "" {
		fmt.Fprintf(&b, ", work %s", c.Work)
	}
	if c.Slow != "" {
		fmt.Fprintf(&b, ", slow %s (%d tasks)", c.Slow, c.SlowTasks)
	}
	m := r.Machine
	fmt.Fprintf(&b, "\nbroker %s; %s/%s, %d CPUs, %.1f GiB, %s; seed %d; %.1fs\n\n",
		r.Broker, m.OS, m.Arch, m.CPUs, float64(m.MemoryBytes)/(1<<30), m.Go, r.Seed, r.Seconds)
	paced := slices.ContainsFunc(r.Runs, func(run RunResult) bool { return run.KeptUp != nil })
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "run\ttasks/s\tMB/s\tp50 ms\tp95 ms\tp99 ms\tmax ms\tseconds")
	if paced {
		fmt.Fprint(tw, "\tkept up")
	}
	fmt.Fprintln(tw)
	for _, run := range r.Runs {
		name := run.Name
		if run.Baseline {
			name += " (baseline)"
		}
		d := run.Latency
		if run.Lateness != nil {
			d = run.Lateness
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%.2f", name, run.TasksPerSec, run.MBPerSec,
			ms(d, func(d *Distribution) float64 { return d.P50 }), ms(d, func(d *Distribution) float64 { return d.P95 }),
			ms(d, func(d *Distribution) float64 { return d.P99 }), ms(d, func(d *Distribution) float64 { return d.Max }), run.Seconds)
		if paced {
			fmt.Fprintf(tw, "\t%s", yesNo(run.KeptUp))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Runs) > 0 {
		b.WriteString(latencyNote(r.Scenario))
	}
	for _, run := range r.Runs {
		if run.KeptUp == nil {
			continue
		}
		verdict := "kept up"
		if !*run.KeptUp {
			verdict = "fell behind"
		}
		fmt.Fprintf(&b, "%s: %s: offered %.0f/s, achieved %.0f/s; the last task finished %.2fs after the last submission (allowed %.2fs)\n",
			run.Name, verdict, run.OfferedPerSec, run.TasksPerSec, run.TailSeconds, run.AllowedTailSeconds)
	}
	for _, x := range r.Ratios {
		fmt.Fprintf(&b, "ratio %s: %.2f\n", x.Name, x.Value)
	}
	for _, run := range r.Runs {
		if run.Lateness != nil {
			fmt.Fprintf(&b, "%s: %d early (published before due); visible after due p50 %.1f ms, p99 %.1f ms\n",
				run.Name, run.Lateness.Early, run.Latency.P50, run.Latency.P99)
		}
	}
	if ch := r.Chaos; ch != nil {
		fmt.Fprintf(&b, "chaos: %d worker kills, %d broker kills, %d workers exited by themselves\n", ch.WorkerKills, ch.BrokerKills, ch.WorkerExits)
	}
	for _, run := range r.Runs {
		v := run.Verification
		if v == nil {
			continue
		}
		verdict := "OK"
		if !v.OK {
			verdict = "FAILED: " + strings.Join(v.Problems, "; ")
		}
		counters := ""
		if v.RunCounters {
			counters = fmt.Sprintf(", reruns %d (run counters)", v.Reruns)
		}
		fmt.Fprintf(&b, "verified %s by a fresh read_committed reader of %s: expected %d, records %d, unique %d, duplicates %d, missing %d, unexpected %d%s, early %d: %s\n",
			run.Name, v.Topic, v.Expected, v.Records, v.Unique, v.Duplicates, v.Missing, v.Unexpected, counters, v.Early, verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(b *bool) string {
	switch {
	case b == nil:
		return "-"
	case *b:
		return "yes"
	}
	return "no"
}

func ms(d *Distribution, f func(*Distribution) float64) string {
	if d == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", f(d))
}

// latencyNote says what the latency columns measure.
func latencyNote(s Scenario) string {
	switch s {
	case Produce:
		return "latency: submission to acknowledgment\n"
	case Process:
		return "latency: not measured (the queue is pre-loaded; it would be the wait in the backlog)\n"
	case E2E:
		return "latency: submission to handler start\n"
	case Delay:
		return "lateness: publish time minus due time\n"
	case Chaos:
		return "latency: submission to visibility of the output to a read_committed reader\n"
	}
	return ""
}
