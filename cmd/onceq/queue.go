package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/onceq/onceq/control"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/inspect"
)

func newQueueCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "List queues with their tasks by state; pause, resume and limit them",
	}
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", time.Minute, "give up after this long")
	cmd.AddCommand(newQueueListCmd(g, &timeout), newQueueStatsCmd(g, &timeout), newQueuePauseCmd(g, &timeout, true), newQueuePauseCmd(g, &timeout, false),
		newQueueLimitCmd(g, &timeout), newQueueLimitsCmd(g, &timeout))
	return cmd
}

func newQueueListCmd(g *globals, timeout *time.Duration) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the queues that have task records: paused or not, and their tasks by state",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				queues, err := in.Queues(ctx)
				if err != nil {
					return err
				}
				paused, err := in.Paused(ctx)
				if err != nil {
					return err
				}
				counts, err := in.CountsOf(ctx, queues)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				header := "QUEUE\tPAUSED"
				states := slices.DeleteFunc(slices.Clone(onceq.TaskStates), func(s onceq.TaskState) bool { return s == onceq.StatePending })
				states = append([]onceq.TaskState{onceq.StatePending}, states...)
				for _, s := range states {
					header += "\t" + string(s)
				}
				fmt.Fprintln(tw, header)
				for i, q := range queues {
					line := q + "\t" + strconv.FormatBool(paused[q])
					for _, s := range states {
						line += "\t" + strconv.FormatInt(counts[i][s], 10)
					}
					fmt.Fprintln(tw, line)
				}
				return tw.Flush()
			})
		},
	}
}

func newQueuePauseCmd(g *globals, timeout *time.Duration, pause bool) *cobra.Command {
	use, short := "resume QUEUE", "Let workers run a paused queue again"
	if pause {
		use, short = "pause QUEUE", "Stop a queue: workers start none of its tasks until it is resumed"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `. The pause is kept in the onceq-control topic: it holds across
worker restarts, and workers stop fetching the queue within a second of it (the
tasks they fetched already wait, unstarted). Nothing of the queue is lost.`,
		Args: exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := onceq.ValidateAnyQueue(args[0]); err != nil {
				return usageError{err}
			}
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				if pause {
					if err := control.New(in).Pause(ctx, args[0]); err != nil {
						return err
					}
					fmt.Fprintf(g.stdout, "paused %s\n", args[0])
					return nil
				}
				if err := control.New(in).Resume(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "resumed %s\n", args[0])
				return nil
			})
		},
	}
}

func newQueueStatsCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var asJSON bool
	var lane string
	cmd := &cobra.Command{
		Use:   "stats [QUEUE...] | --lane LANE",
		Short: "Show queues' tasks by state, pause state, and each consumer group's waiting tasks",
		Long: `Show, for each queue (without arguments, every queue that has task records): whether
it is paused, its retained tasks by state (from their task records), and for each
consumer group with offsets on it, its state, members and the tasks waiting (the
records past its committed offsets). The scheduled and retrying tasks with task
records (submitted with produce --unique or over HTTP, and every retry) are
counted by when they fall due: within 1m, 1h and 1d, and overdue (past their due
time, not yet started) with the oldest due time. Every task in the delay buckets,
with or without a record, is counted per bucket by onceq delay stats. With
--lane, the queues are the lane queues of LANE that have retained tasks.`,
		Example: "  onceq queue stats emails receipts\n  onceq queue stats --lane fn --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			if lane != "" {
				if len(args) > 0 {
					return usageError{errors.New("--lane lists the lane's queues: give it without queue names")}
				}
				if err := onceq.ValidateQueue(lane); err != nil {
					return usageError{fmt.Errorf("--lane: %w", err)}
				}
			}
			for _, q := range args {
				if err := onceq.ValidateAnyQueue(q); err != nil {
					return usageError{err}
				}
			}
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				queues := args
				var err error
				switch {
				case lane != "":
					if queues, err = in.LaneQueues(ctx, lane); err != nil {
						return err
					}
				case len(queues) == 0:
					if queues, err = in.Queues(ctx); err != nil {
						return err
					}
				}
				all, err := in.StatsOf(ctx, queues)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSONLines(g.stdout, all)
				}
				for _, st := range all {
					fmt.Fprintf(g.stdout, "%s (paused %v)\n", st.Queue, st.Paused)
					writeCounts(g.stdout, "tasks", st.Tasks)
					fmt.Fprintf(g.stdout, "  failed attempts: %d\n", st.Failed)
					if st.LaneQueues > 0 {
						writeCounts(g.stdout, fmt.Sprintf("lane in total (%d lane queues)", st.LaneQueues), st.LaneTasks)
					}
					if len(st.ByPriority) > 0 {
						fmt.Fprint(g.stdout, "  unfinished by priority:")
						for p := onceq.MaxPriority; p >= 0; p-- {
							if n := st.ByPriority[p]; n > 0 {
								fmt.Fprintf(g.stdout, " %d=%d", p, n)
							}
						}
						fmt.Fprintln(g.stdout)
					}
					fmt.Fprintf(g.stdout, "  due: overdue=%d", st.Overdue)
					if st.Overdue > 0 {
						fmt.Fprintf(g.stdout, " (oldest %s)", st.OldestDue.UTC().Format(time.RFC3339))
					}
					for _, h := range delay.Horizons {
						fmt.Fprintf(g.stdout, " within-%s=%d", h.Name, st.DueWithin[h.Name])
					}
					fmt.Fprintln(g.stdout)
					for _, gr := range st.Groups {
						approx := ""
						if !gr.Exact {
							approx = "~"
						}
						fmt.Fprintf(g.stdout, "  group %s (%s, %d members): %s%d past its offsets\n", gr.Group, gr.State, gr.Members, approx, gr.Waiting)
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per queue")
	cmd.Flags().StringVar(&lane, "lane", "", "show every lane queue of this lane (LANE/<label>) with retained tasks")
	return cmd
}

// writeCounts writes a line of task counts, every state's, under a name.
func writeCounts(w io.Writer, name string, counts map[onceq.TaskState]int64) {
	fmt.Fprintf(w, "  %s:", name)
	for _, s := range onceq.TaskStates {
		fmt.Fprintf(w, " %s=%d", s, counts[s])
	}
	fmt.Fprintln(w)
}
