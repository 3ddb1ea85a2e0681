package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/internal/ops"
	"github.com/onceq/onceq/periodic"
)

func newPeriodicCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "periodic",
		Short: "Add, list and remove periodic tasks: cron specs and intervals, run once per tick",
		Long: `Periodic tasks: a schedule submits a task to its queue at each tick, every
fixed interval (--every, multiples of it since the unix epoch: every 1h fires on
the hour, UTC) or at the times of a 5-field cron spec (--cron) in a time zone
(--tz, default UTC).

Schedules live in the compacted topic onceq-periodic and survive restarts.
Workers run the scheduler (onceq worker --scheduler, on by default), and so does
"onceq periodic run": each submits every tick, a little ahead of it, as a task
with the ID NAME@TICK (the tick in RFC 3339, UTC, such as
nightly@2030-01-01T02:00:00Z) due at the tick. The ID is an idempotency key, so
the tick runs once however many schedulers run, and never early.

Ticks that every scheduler missed (all were down) are caught up on when one
starts again (--catch-up, the default: at most 100, the latest) or skipped
(--skip-missed).`,
	}
	cmd.AddCommand(newPeriodicAddCmd(g), newPeriodicListCmd(g), newPeriodicRemoveCmd(g), newPeriodicRunCmd(g))
	return cmd
}

// withSchedules opens the schedules' store and runs fn.
func withSchedules(cmd *cobra.Command, g *globals, timeout time.Duration, fn func(context.Context, *periodic.Store) error) error {
	return withStore(cmd, g, timeout, periodic.Open, fn)
}

type periodicAddFlags struct {
	queue       string
	every       time.Duration
	cron        string
	tz          string
	payload     string
	catchUp     bool
	skipMissed  bool
	maxAttempts int
	taskTimeout time.Duration
	timeout     time.Duration
}

func newPeriodicAddCmd(g *globals) *cobra.Command {
	var f periodicAddFlags
	cmd := &cobra.Command{
		Use:   "add NAME --queue Q (--every D | --cron SPEC)",
		Short: "Add a schedule, or replace the schedule of this name",
		Long: `Add a schedule, or replace the schedule of this name. NAME has 1 to 200
letters, digits, '.', '_' or '-'. Replacing a schedule with the same timing
goes on from its last tick; with another timing it starts anew.

--cron takes minute hour day-of-month month day-of-week ("0 9 * * 1-5": 09:00
on weekdays) or @hourly, @daily, @weekly, @monthly, @yearly. In a zone with
daylight saving time, a fixed hour fires once a day (a skipped time when the
clock resumes, a repeated time at its first pass); a '*' in the hour follows
real time.`,
		Example: `  onceq periodic add heartbeat --queue pings --every 30s
  onceq periodic add morning-report --queue reports --cron '0 9 * * 1-5' --tz Europe/Paris --payload '{"kind":"sales"}'
  onceq periodic add cleanup --queue jobs --cron @daily --skip-missed`,
		Args: exactArgs(1, "one schedule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sch, err := f.schedule(cmd, args[0])
			if err != nil {
				return err
			}
			return withSchedules(cmd, g, f.timeout, func(ctx context.Context, s *periodic.Store) error {
				verb := "added"
				if _, ok := s.Get(sch.Name, time.Now()); ok {
					verb = "replaced"
				}
				sch, err := s.Add(ctx, sch)
				if err != nil {
					return err
				}
				next := sch.Timing()
				if e, ok := s.Get(sch.Name, time.Now()); ok && !e.Next.IsZero() {
					next += ", next " + formatTick(e.Schedule, e.Next) + " (task ID " + periodic.TaskID(sch.Name, e.Next) + ")"
				}
				_, err = fmt.Fprintf(g.stdout, "%s %s: %s\n", verb, sch.Name, next)
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.queue, "queue", "", "the queue the ticks' tasks go to (required; it must exist)")
	fl.DurationVar(&f.every, "every", 0, "a fixed interval, whole seconds from 1s to 366 days (8784h), such as 30s, 15m or 24h")
	fl.StringVar(&f.cron, "cron", "", "a cron spec: minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly")
	fl.StringVar(&f.tz, "tz", "", "the IANA time zone of --cron, such as Europe/Paris (default UTC)")
	fl.StringVar(&f.payload, "payload", "", "each tick's payload")
	fl.BoolVar(&f.catchUp, "catch-up", false, "submit the ticks every scheduler missed, late (the default; at most 100, the latest)")
	fl.BoolVar(&f.skipMissed, "skip-missed", false, "drop the ticks every scheduler missed")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "runs of each tick's task before it is dead-lettered (0: the worker's default)")
	fl.DurationVar(&f.taskTimeout, "task-timeout", 0, "time-to-run of each tick's task (0: the worker's default)")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")
	setsOption(fl, "TZ", "tz")
	setsOption(fl, "Timeout", "task-timeout")
	setsOption(fl, "Missed", "catch-up", "skip-missed")
	return cmd
}

// schedule checks the flags and returns the schedule they describe.
func (f periodicAddFlags) schedule(cmd *cobra.Command, name string) (periodic.Schedule, error) {
	fl := cmd.Flags()
	if err := periodic.ValidateName(name); err != nil {
		return periodic.Schedule{}, usageError{err}
	}
	switch {
	case f.catchUp && f.skipMissed:
		return periodic.Schedule{}, usagef("--catch-up and --skip-missed: give one of them")
	case fl.Changed("every") && fl.Changed("cron"):
		return periodic.Schedule{}, usagef("--every and --cron: give one of them, an interval or a cron spec")
	case !fl.Changed("every") && !fl.Changed("cron"):
		return periodic.Schedule{}, usagef("give --every D (an interval such as 30s or 1h) or --cron SPEC (such as '0 9 * * 1-5')")
	}
	sch := periodic.Schedule{Name: name, Queue: f.queue, Every: f.every, Cron: f.cron, TZ: f.tz,
		MaxAttempts: f.maxAttempts, Timeout: f.taskTimeout}
	if f.payload != "" {
		sch.Payload = []byte(f.payload)
	}
	if f.skipMissed {
		sch.Missed = periodic.SkipMissed
	}
	if err := sch.Validate(); err != nil {
		return periodic.Schedule{}, flagError(fl, err)
	}
	return sch, nil
}

// formatTick writes a tick in its schedule's zone.
func formatTick(s periodic.Schedule, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if zone, err := time.LoadLocation(s.TZ); s.Cron != "" && err == nil {
		t = t.In(zone)
	}
	return t.Format(time.RFC3339)
}

func newPeriodicListCmd(g *globals) *cobra.Command {
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the schedules, with their next ticks",
		Long: `List the schedules: their timing, missed-ticks policy, the latest tick a
scheduler submitted (SUBMITTED: ticks are submitted a little ahead, so it may
come after NEXT) and the next tick, in the schedule's zone. --json prints one
object per schedule with name, queue, every or cron and tz, payload (or
payload_base64 when it is not UTF-8), max_attempts, timeout, missed, since, last
and next (RFC 3339, UTC).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withSchedules(cmd, g, timeout, func(_ context.Context, s *periodic.Store) error {
				entries := s.List(time.Now())
				if asJSON {
					return writeJSONLines(g.stdout, entries)
				}
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tQUEUE\tSCHEDULE\tMISSED\tSUBMITTED\tNEXT")
				for _, e := range entries {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Queue, e.Timing(), e.Missed, formatTick(e.Schedule, e.Last), formatTick(e.Schedule, e.Next))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per schedule")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	return cmd
}

func newPeriodicRemoveCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a schedule (its ticks already submitted still run)",
		Args:  exactArgs(1, "one schedule name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := periodic.ValidateName(args[0]); err != nil {
				return usageError{err}
			}
			return withSchedules(cmd, g, timeout, func(ctx context.Context, s *periodic.Store) error {
				if err := s.Remove(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(g.stdout, "removed %s\n", args[0])
				return err
			})
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	return cmd
}

func newPeriodicRunCmd(g *globals) *cobra.Command {
	var (
		metricsAddr string
		buckets     string
		lead        time.Duration
		maxCatchUp  int
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a scheduler alone (workers run one unless --scheduler=false)",
		Long: `Run a scheduler alone: it follows the schedules and submits their ticks until
SIGINT or SIGTERM. Run as many as you like: each submits every tick, and workers
run each once. It serves /metrics, /healthz and /readyz on --metrics-addr.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			planner, err := parseBuckets(buckets)
			if err != nil {
				return err
			}
			if metricsAddr != "" {
				if err := ops.CheckAddr("metrics-addr", metricsAddr); err != nil {
					return err
				}
			}
			conn, err := g.conn()
			if err != nil {
				return err
			}
			reg := ops.NewRegistry()
			popts := []periodic.Opt{periodic.Conn(conn), periodic.Lead(lead), periodic.MaxCatchUp(maxCatchUp),
				periodic.Registerer(reg), periodic.Logger(g.log)}
			if planner != nil {
				popts = append(popts, periodic.Planner(planner))
			}
			s, err := periodic.NewScheduler(popts...)
			if err != nil {
				return flagError(cmd.Flags(), err)
			}
			stop, err := listenOps(metricsAddr, false, reg, g.log, component{"scheduler", s})
			if err != nil {
				return err
			}
			defer stop()
			return s.Run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:0", "serve /metrics, /healthz and /readyz here (port 0: any free port, logged; empty: off)")
	bucketsFlag(fl, &buckets)
	fl.DurationVar(&lead, "lead", periodic.DefaultLead, "submit each tick this long before it; a tick reached later than this after it was missed")
	fl.IntVar(&maxCatchUp, "max-catch-up", periodic.DefaultMaxCatchUp, "missed ticks of a schedule submitted when catching up, at most (the latest)")
	setsOption(fl, "Planner", "buckets")
	return cmd
}
