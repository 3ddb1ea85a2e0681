// Package demo is the workload and the checks of `onceq demo`: a mix of
// immediate, delayed, duplicate, failing-then-succeeding and
// always-failing tasks (NewPlan), and the checks of every guarantee on what
// an independent read_committed reader finds afterwards in the output
// queue and the dead letters (Plan.CheckOutputs, Plan.CheckDeadLetters).
//
// The tasks are meant for workers running the flaky: handler of package
// handlers, writing to the run's Names.Out: it fails a task as its handlers.FailHeader
// says and stamps handlers.RunsHeader and handlers.StartedHeader on its
// output, which the checks read. Starting the broker and the workers is
// the caller's part.
package demo
