package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/inspect"
)

func newQueueLimitCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var rate string
	var running int
	var clear bool
	cmd := &cobra.Command{
		Use:   "limit QUEUE (--rate COUNT/UNIT | --running N | --clear)",
		Short: "Limit a queue's starts per second and tasks running at once, across every worker",
		Long: `Limit a queue across every worker of every group that runs it:

  --rate 10/s     at most 10 starts in any second (also 600/m, 2/h, 5/250ms)
  --running 5     at most 5 of its tasks running at once
  --clear         lift the queue's limit

Setting one keeps nothing of the limit before it: give both flags to keep both.
A task its limit holds waits, unstarted, in its worker's slot: it never fails
for it and spends no attempt (metrics onceq_limit_waiting_tasks and
onceq_limit_wait_seconds). Workers read the limit within a moment; it is kept
in the onceq-limits topic and holds across restarts, rebalances and crashes (a
worker that dies holds its places until its tasks' time-to-run ends).`,
		Example: "  onceq queue limit payments --rate 10/s --running 5\n  onceq queue limit payments --clear",
		Args:    exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue := args[0]
			if err := onceq.ValidateAnyQueue(queue); err != nil {
				return usageError{err}
			}
			var l control.Limit
			switch {
			case clear && (rate != "" || cmd.Flags().Changed("running")):
				return usageError{errors.New("--clear lifts the whole limit: give it alone")}
			case !clear && rate == "" && !cmd.Flags().Changed("running"):
				return usageError{errors.New("give --rate, --running, or both (or --clear to lift the limit)")}
			}
			if rate != "" {
				count, per, err := control.ParseRate(rate)
				if err != nil {
					return usageError{fmt.Errorf("--rate: %w", err)}
				}
				l.Count, l.Per = count, per
			}
			if cmd.Flags().Changed("running") {
				if running < 1 {
					return usageError{fmt.Errorf("--running %d: want 1 or more tasks running at once (--clear lifts the limit)", running)}
				}
				l.Running = running
			}
			if err := l.Validate(); err != nil {
				return usageError{err}
			}
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				if err := control.New(in).SetLimit(ctx, queue, l); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "%s: limit %s\n", queue, l)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&rate, "rate", "", "at most COUNT starts per UNIT across every worker: 10/s, 600/m, 2/h or 5/250ms")
	cmd.Flags().IntVar(&running, "running", 0, "at most N tasks of the queue running at once across every worker")
	cmd.Flags().BoolVar(&clear, "clear", false, "lift the queue's limit")
	return cmd
}

func newQueueLimitsCmd(g *globals, timeout *time.Duration) *cobra.Command {
	return &cobra.Command{
		Use:   "limits",
		Short: "List the queues' limits (onceq queue limit), and their tasks running now across workers",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				limits, err := control.New(in).Limits(ctx)
				if err != nil {
					return err
				}
				queues := make([]string, 0, len(limits))
				for q := range limits {
					queues = append(queues, q)
				}
				slices.Sort(queues)
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "QUEUE\tRATE\tRUNNING\tRUNNING NOW")
				for _, q := range queues {
					l := limits[q]
					r, n := "-", "-"
					if l.Count > 0 {
						r = l.Rate()
					}
					if l.Running > 0 {
						n = strconv.Itoa(l.Running)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", q, r, n, l.RunningNow)
				}
				return tw.Flush()
			})
		},
	}
}
