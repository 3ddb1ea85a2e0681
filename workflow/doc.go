// Package workflow runs chains, groups, chords and dependencies of onceq
// tasks, every step, join and callback exactly once, with no leader and
// no lock.
//
// A workflow is a tree of nodes: Task (one task), Chain (steps one after
// another, each with the output of the one before as its input), Group
// (members in parallel; its output is all of theirs) and Chord (a group,
// then a callback with the members' results). Any node may have OnSuccess
// and OnError callbacks; the root may wait for tasks of any queue with
// After, whichever was submitted first.
//
//	wf := workflow.Chain(
//		workflow.Task(onceq.Task{Queue: "fetch", Payload: day}),
//		workflow.Chord(
//			workflow.Group(
//				workflow.Task(onceq.Task{Queue: "render", Payload: []byte("eu")}),
//				workflow.Task(onceq.Task{Queue: "render", Payload: []byte("us")}),
//			),
//			workflow.Task(onceq.Task{Queue: "merge"}),
//		),
//		workflow.Task(onceq.Task{Queue: "mail"}),
//	).OnError(workflow.Task(onceq.Task{Queue: "alerts"}))
//	id, err := workflow.Submit(ctx, producer, "report-2026-11-25", wf)
//
// A step's handler is an ordinary consumer.Handler: t.Input is what the
// step before it returned (Results decodes a group's), and what it sets
// with t.SetResult is its output.
//
//	mux.Route("merge", consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
//		parts, err := workflow.Results(t.Input)
//		if err != nil {
//			return consumer.SkipRetry(err)
//		}
//		return t.SetResult(merge(parts))
//	}))
//
// How it runs: Submit writes one task of onceq.WorkflowQueue that holds
// the definition. A Service (onceq worker and onceq serve run one) starts
// it once its dependencies succeeded, emitting its first tasks in the
// transaction that ends the start task. Every task carries its place in
// the workflow (the onceq-workflow header); the worker that ends it emits,
// in the transaction of its outcome, the next step, its callbacks, or its
// report to its group's join. A join is state of the service's worker,
// keyed by the join, so its members may run in any partition of any
// queue: the service counts each once, and continues when the last one
// reported, or at the first failure. So a chord's callback runs once,
// with all the results, whatever the order, crashes and retries.
//
// Get and Wait tell where a workflow stands (pending, waiting, running,
// succeeded, failed), which step failed and why, its output and every
// step's task record, from a view of the task records (package inspect):
// the workers of a workflow's queues must keep task records (the
// default). WriteStatus and WriteJSON print a status. Cancel stops a
// workflow that is not done: its cancel stays in the control topic, and a
// worker ends each of its steps canceled instead of starting it.
//
// JSON lines (ParseLine) give the same to onceq produce --file and to the
// HTTP API's bulk publish, for any language:
//
//	{"id":"report-7","chain":[{"queue":"fetch"},{"group":[{"queue":"render"},{"queue":"render"}]}]}
//	{"queue":"ship","id":"order-7-ship","depends_on":["order-7-pay"]}
package workflow
