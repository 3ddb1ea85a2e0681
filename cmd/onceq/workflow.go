package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/control"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/workflow"
)

func newWorkflowCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Ask where a workflow stands: its steps' states, where it stopped and why; wait for it",
		Long: `A workflow (a chain, group or chord, or a task with dependencies, submitted with
onceq produce --file or the HTTP API's bulk publish) is a task of the queue
` + onceq.WorkflowQueue + `, whose ID the submission's receipt prints. These commands
read its record and its steps' task records, as onceq task does; onceq task get
` + onceq.WorkflowQueue + ` ID shows the same. workflow cancel stops one.`,
	}
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", time.Minute, "give up after this long (workflow wait: the longest wait)")
	cmd.AddCommand(newWorkflowGetCmd(g, &timeout), newWorkflowWaitCmd(g, &timeout), newWorkflowCancelCmd(g, &timeout), newWorkflowRetryCmd(g, &timeout))
	return cmd
}

// printWorkflow writes a workflow's status as text or JSON.
func printWorkflow(g *globals, st workflow.Status, asJSON bool) error {
	if asJSON {
		return workflow.WriteJSON(g.stdout, st)
	}
	return workflow.WriteStatus(g.stdout, st)
}

// workflowID checks a workflow ID argument.
func workflowID(id string) error {
	if err := workflow.ValidateID(id); err != nil {
		return usagef("%v", err)
	}
	return nil
}

func newWorkflowGetCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show a workflow's state, where it stopped and why, its output and every step",
		Args:  exactArgs(1, "a workflow ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := workflowID(args[0]); err != nil {
				return err
			}
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				st, err := workflow.Get(ctx, in, args[0])
				if err != nil {
					return err
				}
				return printWorkflow(g, st, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON (records and output in onceq's JSON)")
	return cmd
}

func newWorkflowWaitCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait until a workflow succeeded or failed, then show it",
		Long: `Wait until the workflow succeeded or failed and show it, as workflow get does.
The wait wakes on the commits that finish its steps, not on a polling period.
Exit 0 when it succeeded, 1 when it failed or --timeout passed first.`,
		Args: exactArgs(1, "a workflow ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := workflowID(args[0]); err != nil {
				return err
			}
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				st, err := workflow.Wait(ctx, in, args[0])
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("workflow %s: not done after %v (--timeout): %s", args[0], *timeout, st.State)
				}
				if err != nil {
					return err
				}
				if err := printWorkflow(g, st, asJSON); err != nil {
					return err
				}
				if st.State != workflow.StateSucceeded {
					return fmt.Errorf("workflow %s failed: %s", args[0], st.Reason)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func newWorkflowCancelCmd(g *globals, timeout *time.Duration) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a workflow: no step of it starts from then on",
		Long: `Cancel a workflow that is not done. Workers read the cancel milliseconds after
it is written; from then on no step of the workflow starts. One that has not
started never does. In a running one the steps running finish, and every other
step, callbacks included, ends canceled when it comes to a worker, so the
workflow ends failed at the first of them (a delayed step ends when it comes
due). A workflow already done is left as it is. workflow wait ID waits for the
end.`,
		Args: exactArgs(1, "a workflow ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := workflowID(id); err != nil {
				return err
			}
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				st, err := workflow.Cancel(ctx, control.New(in), id)
				switch {
				case err != nil:
					return err
				case st.State.Final():
					fmt.Fprintf(g.stdout, "workflow %s already %s: nothing to cancel\n", id, st.State)
				case st.Root == nil || st.State == workflow.StateWaiting:
					fmt.Fprintf(g.stdout, "workflow %s canceled: it will not start\n", id)
				default:
					fmt.Fprintf(g.stdout, "workflow %s canceled: no step starts from now on; the steps running finish\n", id)
				}
				return nil
			})
		},
	}
}

func newWorkflowRetryCmd(g *globals, timeout *time.Duration) *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Run a workflow that failed before it started again, under its ID",
		Long: `Run again a workflow that failed before it started (a queue that did not
exist, say: create it first): its start task is requeued from its dead letter
with the definition it was submitted with. A workflow that started and failed
at a step is refused, since its steps ran under their IDs, which run once:
submit it again under a new ID. workflow wait ID waits for the end.`,
		Args: exactArgs(1, "a workflow ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := workflowID(id); err != nil {
				return err
			}
			conn, err := g.conn()
			if err != nil {
				return err
			}
			p, err := producer.New(producer.Conn(conn), producer.Logger(g.log))
			if err != nil {
				return err
			}
			defer p.Close()
			return withInspectorOf(cmd, g, *timeout, func(ctx context.Context, in *inspect.Inspector) error {
				if _, err := workflow.Retry(ctx, in, p, conn, id); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "workflow %s retried: its start task runs again\n", id)
				return nil
			})
		},
	}
}
