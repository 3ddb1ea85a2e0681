package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/producer"
)

func newDLQCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, count and requeue dead letters",
		Long: `Dead letters are the tasks a worker gave up on: failed on their last attempt
(max_attempts), sent there by the handler (failed), expired before they ran
(expired), or unreadable (malformed). They are kept in onceq-dlq-QUEUE with every
original header. The commands read them as any read_committed consumer does, up
to the last stable offset at the time of the call.`,
	}
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", time.Minute, "give up reading and writing after this long")
	cmd.AddCommand(newDLQListCmd(g, &timeout), newDLQRequeueCmd(g, &timeout), newDLQStatsCmd(g, &timeout))
	return cmd
}

// withReader checks the queue names and the timeout, connects a dead-letter
// reader and runs fn with a context bounded by the timeout.
func withReader(cmd *cobra.Command, g *globals, timeout time.Duration, queues []string, fn func(context.Context, *dlq.Reader) error) error {
	for _, q := range queues {
		if err := onceq.ValidateAnyQueue(q); err != nil {
			return usageError{err}
		}
	}
	if timeout <= 0 {
		return usagef("--timeout %v: want a positive duration such as 30s", timeout)
	}
	conn, err := g.conn()
	if err != nil {
		return err
	}
	r, err := dlq.NewReader(conn)
	if err != nil {
		return err
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	return fn(ctx, r)
}

func newDLQListCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var (
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "Show a queue's dead letters",
		Long: `Show a queue's dead letters in partition and offset order: where each is, its
task ID, attempt, failure time, reason, payload size and error text (cut; --json
has it whole, with the headers and the payload).`,
		Args: exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usagef("--limit %d: want 0 (all) or more", limit)
			}
			queue := args[0]
			return withReader(cmd, g, *timeout, args, func(ctx context.Context, r *dlq.Reader) error {
				letters, total, err := r.List(ctx, queue, limit)
				if err != nil {
					return err
				}
				if asJSON {
					err = dlq.WriteJSON(g.stdout, letters)
				} else {
					err = dlq.WriteTable(g.stdout, letters)
				}
				if err == nil && len(letters) < total {
					fmt.Fprintf(g.stderr, "%d of %d dead letters shown: --limit 0 shows all\n", len(letters), total)
				}
				return err
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many dead letters (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per dead letter")
	return cmd
}

func newDLQRequeueCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var (
		ids                []string
		all, reset, dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "requeue QUEUE (--id ID ... | --all)",
		Short: "Write dead letters back to their queue, exactly once",
		Long: `Write dead letters back to their queue as new incarnations of their tasks: the
same ID, key, payload and headers, with onceq-requeued set to the dead letter's
PARTITION/OFFSET, so a worker runs them although their ID was processed. For
each ID the newest dead letter is requeued. All of them are written in one
transaction, or none.

Requeueing is exactly once: running the same requeue twice writes the task
twice under one dedup key, and a worker runs it once.

A requeued task keeps its attempt number: one that used up its attempts runs
once more, and goes back to the dead letters if that fails. --reset-attempts
starts it over at attempt 1. Requeue one dead letter always with or always
without --reset-attempts: mixing them may run it twice.

Malformed dead letters cannot be requeued: --all skips them with a message;
--id naming one, or an ID without dead letters, exits 1 (the others are
requeued).`,
		Args: exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(ids) > 0) {
				return usagef("give --id ID (repeatable) or --all, not both and not neither")
			}
			for _, id := range ids {
				if err := onceq.ValidateID(id); err != nil {
					return usageError{fmt.Errorf("--id: %w", err)}
				}
			}
			ids = slices.Compact(slices.Sorted(slices.Values(ids)))
			queue := args[0]
			return withReader(cmd, g, *timeout, args, func(ctx context.Context, r *dlq.Reader) error {
				rs, problems, err := r.Requeues(ctx, queue, ids, reset, time.Now())
				if err != nil {
					return err
				}
				return requeue(ctx, g, queue, rs, problems, all, dryRun)
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&ids, "id", nil, "requeue the newest dead letter of this task ID (repeatable)")
	f.BoolVar(&all, "all", false, "requeue the newest dead letter of every task ID")
	f.BoolVar(&reset, "reset-attempts", false, "start the requeued tasks over at attempt 1")
	f.BoolVar(&dryRun, "dry-run", false, "show what would be requeued, write nothing")
	return cmd
}

// requeue writes the chosen dead letters and reports them and the
// problems: skipped with --all, a failure with --id.
func requeue(ctx context.Context, g *globals, queue string, rs []dlq.Requeue, problems []error, all, dryRun bool) error {
	if all {
		for _, p := range problems {
			fmt.Fprintf(g.stderr, "skipped: %v\n", strings.TrimPrefix(p.Error(), "dlq: "))
		}
	}
	verb := "requeued"
	if dryRun {
		verb = "would requeue"
	} else if len(rs) > 0 {
		conn, err := g.conn()
		if err != nil {
			return err
		}
		p, err := producer.New(producer.Conn(conn), producer.Logger(g.log))
		if err != nil {
			return err
		}
		defer p.Close()
		if err := dlq.Write(ctx, p, rs); err != nil {
			return err
		}
	}
	for _, r := range rs {
		fmt.Fprintf(g.stdout, "%s %s from %s (attempt %d)\n", verb, r.Task.ID, dlq.Coordinates(&r.From), r.Task.Attempt)
	}
	fmt.Fprintf(g.stdout, "%s %d dead letters to %s\n", verb, len(rs), queue)
	if !all && len(problems) > 0 {
		return errors.Join(problems...)
	}
	return nil
}

func newDLQStatsCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [QUEUE...]",
		Short: "Count dead letters by reason",
		Long: `Count the dead letters of each queue by reason, with the oldest and newest
failure time. Without a queue, every queue that has a dead-letter topic.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withReader(cmd, g, *timeout, args, func(ctx context.Context, r *dlq.Reader) error {
				stats, err := r.QueueStats(ctx, args...)
				if err != nil {
					return err
				}
				if asJSON {
					return dlq.WriteStatsJSON(g.stdout, stats)
				}
				return dlq.WriteStatsTable(g.stdout, stats)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per queue")
	return cmd
}
