package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/workflow"
)

func newTaskCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Ask what happened to a task: its state and result, wait for it, cancel it",
		Long: `Workers record each task's transitions (scheduled, retrying, succeeded with its
result, dead, expired, canceled) in onceq-rec-QUEUE, in the transaction of the
outcome. These commands read that topic, as any read_committed consumer does,
into a view in memory: the records are there as soon as their transaction
commits. A task without a record is pending (submitted and not yet run), unknown,
or its record is past the workers' --result-retention.`,
	}
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", time.Minute, "give up after this long (task wait: the longest wait)")
	cmd.AddCommand(newTaskGetCmd(g, &timeout), newTaskWaitCmd(g, &timeout), newTaskListCmd(g, &timeout), newTaskCancelCmd(g, &timeout))
	return cmd
}

// withInspector checks the queue name and the task ID (if any), then runs
// fn as withInspectorOf does.
func withInspector(cmd *cobra.Command, g *globals, timeout time.Duration, queue, id string, fn func(context.Context, *inspect.Inspector) error) error {
	if err := onceq.ValidateTaskQueue(queue); err != nil {
		return usageError{err}
	}
	if id != "" {
		if err := onceq.ValidateID(id); err != nil {
			return usageError{err}
		}
	}
	return withInspectorOf(cmd, g, timeout, fn)
}

// withInspectorOf checks the timeout, opens an inspector and runs fn with
// a context bounded by the timeout.
func withInspectorOf(cmd *cobra.Command, g *globals, timeout time.Duration, fn func(context.Context, *inspect.Inspector) error) error {
	if timeout <= 0 {
		return usagef("--timeout %v: want a positive duration such as 30s", timeout)
	}
	in, err := openInspector(g)
	if err != nil {
		return err
	}
	defer in.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	return timedOut(ctx, timeout, fn(ctx, in))
}

// timedOut words err, if ctx's timeout ended it, as a user reads it:
// "timed out after 30s (--timeout)" and what was under way, rather than
// "context deadline exceeded".
func timedOut(ctx context.Context, timeout time.Duration, err error) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("timed out after %v (--timeout; raise it to wait longer): %w", timeout, err)
}

// openInspector opens an inspector on the brokers of the global flags,
// with its view kept in the view cache (viewDir), so that a command
// reads only the records written since the last one: a queue of a
// million retained tasks takes seconds to read whole. A cache another
// command holds (or one that cannot be opened) leaves this one to read
// the records afresh, in memory.
func openInspector(g *globals) (*inspect.Inspector, error) {
	conn, err := g.conn()
	if err != nil {
		return nil, err
	}
	opts := []inspect.Opt{inspect.Conn(conn), inspect.Logger(g.log)}
	dir, err := g.viewDir(conn)
	if err != nil {
		return nil, err
	}
	if dir != "" {
		in, err := inspect.Open(append(opts, inspect.Dir(dir))...)
		if err == nil {
			return in, nil
		}
		g.log.Debug("the view cache is in use or cannot be opened: reading the task records afresh", "dir", dir, "err", err)
	}
	return inspect.Open(opts...)
}

// viewDir is the directory of the view of conn's cluster in the view
// cache (--view-cache), made if needed; "" with --view-cache off. Each
// set of seed brokers has its own: a view knows its topics by their IDs,
// and reads a topic made again anew.
func (g *globals) viewDir(conn broker.Conn) (string, error) {
	root := g.viewCache
	switch root {
	case "off":
		return "", nil
	case "":
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", nil // no home to keep it in: read afresh
		}
		root = filepath.Join(cache, "onceq", "views")
	}
	brokers := slices.Sorted(slices.Values(conn.Brokers))
	sum := sha256.Sum256([]byte(strings.Join(brokers, ",")))
	dir := filepath.Join(root, hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		if g.viewCache != "" {
			return "", usageError{fmt.Errorf("--view-cache %s: %w: name a directory this user may write, or off", g.viewCache, err)}
		}
		return "", nil
	}
	return dir, nil
}

// printTask writes a task's record as text or JSON.
func printTask(g *globals, r onceq.TaskRecord, asJSON bool) error {
	if asJSON {
		return inspect.WriteJSON(g.stdout, r)
	}
	return inspect.WriteTask(g.stdout, r)
}

func newTaskGetCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get QUEUE ID",
		Short: "Show a task's state, attempts, times, error and result (a workflow's steps for a task of " + onceq.WorkflowQueue + ")",
		Args:  exactArgs(2, "a queue and a task ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withInspector(cmd, g, *timeout, args[0], args[1], func(ctx context.Context, in *inspect.Inspector) error {
				if args[0] == onceq.WorkflowQueue {
					// A workflow's task: show the workflow.
					st, err := workflow.Get(ctx, in, args[1])
					if err != nil {
						return err
					}
					return printWorkflow(g, st, asJSON)
				}
				rs, err := in.Attempts(ctx, args[0], args[1])
				if err != nil {
					return err
				}
				if err := printTask(g, rs[len(rs)-1], asJSON); err != nil || asJSON {
					return err
				}
				return inspect.WriteAttempts(g.stdout, rs)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the task record as JSON (the result in base64)")
	return cmd
}

func newTaskWaitCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "wait QUEUE ID",
		Short: "Wait until a task is done, then show it",
		Long: `Wait until the task reaches a final state (succeeded, dead, expired or canceled)
and show its record, as task get does. The wait ends when the commit that
finishes the task is read, not on a polling period. Exit 0 when it succeeded,
1 when it ended otherwise or --timeout passed first.`,
		Args: exactArgs(2, "a queue and a task ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withInspector(cmd, g, *timeout, args[0], args[1], func(ctx context.Context, in *inspect.Inspector) error {
				r, err := in.Wait(ctx, args[0], args[1])
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("task %s of %s: not done after %v (--timeout)", args[1], args[0], *timeout)
				}
				if err != nil {
					return err
				}
				if err := printTask(g, r, asJSON); err != nil {
					return err
				}
				if r.State != onceq.StateSucceeded {
					return fmt.Errorf("task %s of %s ended %s", r.ID, r.Queue, r.State)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the task record as JSON (the result in base64)")
	return cmd
}

func newTaskListCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var (
		states []string
		limit  int
		since  time.Duration
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List a queue's tasks, newest first, by state",
		Args:  exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := inspect.Filter{Limit: limit}
			for _, s := range states {
				st, err := onceq.ParseTaskState(s)
				if err != nil {
					return usagef("--state: %v", err)
				}
				f.States = append(f.States, st)
			}
			if limit < 1 || limit > inspect.MaxLimit {
				return usagef("--limit %d: want 1 to %d", limit, inspect.MaxLimit)
			}
			if since < 0 {
				return usagef("--since %v: want a positive duration such as 1h, or 0 for all", since)
			}
			if since > 0 {
				f.Since = time.Now().Add(-since)
			}
			return withInspector(cmd, g, *timeout, args[0], "", func(ctx context.Context, in *inspect.Inspector) error {
				page, err := in.List(ctx, args[0], f)
				if err != nil {
					return err
				}
				if asJSON {
					return inspect.WriteJSON(g.stdout, page.Tasks...)
				}
				if err := inspect.WriteTasks(g.stdout, page.Tasks); err != nil {
					return err
				}
				if page.Next != "" {
					fmt.Fprintf(g.stderr, "%d tasks shown; there are more: raise --limit or narrow --state and --since\n", len(page.Tasks))
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only tasks in these states (repeatable or comma-separated): scheduled, retrying, succeeded, dead, expired, canceled")
	f.IntVar(&limit, "limit", inspect.DefaultLimit, "show at most this many tasks")
	f.DurationVar(&since, "since", 0, "only tasks whose last transition is this recent (0: all retained)")
	f.BoolVar(&asJSON, "json", false, "print one JSON task record a line")
	return cmd
}

func newTaskCancelCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var ahead bool
	wait := control.DefaultCancelWait
	cmd := &cobra.Command{
		Use:   "cancel QUEUE ID",
		Short: "Cancel a task, and say what came of it",
		Long: `Cancel a task and say what came of it:

  canceled   it ended canceled: it never ran, or it was running, its context was
             canceled and it gave up (exit 0)
  pending    the cancel is recorded; the task (scheduled, retrying or waiting in its
             queue) ends canceled when it reaches a worker (exit 0)
  too late   it was running and finished before the cancel reached it (exit 1)
  final      it was already succeeded, dead, expired or canceled: nothing written (exit 1)
  unknown    no record of it: nothing written (exit 1); --ahead cancels it all the same

The cancel is kept in the onceq-control topic until a worker ends the task,
however it ends, and lapses after the dedup window: it never cancels a later
submission of the ID, unless --ahead asked for that. The command waits up to
--wait for a task that may be running or about to run to end, so that it can
say which way it ended.`,
		Args: exactArgs(2, "a queue and a task ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait < 0 {
				return usagef("--wait %v: want 0 (do not wait) or a positive duration such as 3s", wait)
			}
			opts := []control.CancelOpt{control.CancelWait(wait)}
			if ahead {
				opts = append(opts, control.CancelAhead())
			}
			return withInspector(cmd, g, *timeout, args[0], args[1], func(ctx context.Context, in *inspect.Inspector) error {
				a, err := control.New(in).Cancel(ctx, args[0], args[1], opts...)
				if err != nil {
					return err
				}
				say := a.Describe(args[0], args[1])
				if a.Outcome == control.CancelUnknown {
					say += "; to cancel it all the same, and a submission of it to come within the dedup window, run again with --ahead"
				}
				if !a.Canceled() {
					return errors.New(say)
				}
				fmt.Fprintln(g.stdout, say)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&ahead, "ahead", false, "cancel a task of which there is no record yet: the first submission of the ID within the dedup window ends canceled")
	cmd.Flags().DurationVar(&wait, "wait", control.DefaultCancelWait, "how long to wait for a running or due task to end, to say which way it ended (0: do not wait)")
	return cmd
}
