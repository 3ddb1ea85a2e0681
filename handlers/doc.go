// Package handlers holds onceq's built-in task handlers, the ones
// `onceq worker --handler` names: noop, copy, count, flaky, exec and http.
// Any program that runs a consumer.Worker (the CLI, an HTTP server, a test)
// builds the same handler from the same spec:
//
//	h, outputs, err := handlers.Parse("exec:./send-mail.sh")
//	if errors.Is(err, handlers.ErrSpec) {
//		// bad input: say what Kinds lists
//	}
//	w, err := consumer.New(consumer.WithHandler(h), ...)
//
// outputs are the queues the handler writes to; they must exist before it
// runs. Kinds is the help text of every kind.
//
// A workflow step's input reaches exec: commands as files
// (ONCEQ_INPUT_FILE, and ONCEQ_RESULTS_DIR for a group's output) and
// http: servers as a JSON envelope (StepContentType).
//
// The count: and flaky: handlers exist to verify a deployment: they count
// each task ID's runs in the partition state and write the count in
// RunsHeader and the start time in StartedHeader of their output, so an
// independent reader can check that every count is 1 (executed once) and
// that no task started before its due time (never early). FailHeader makes
// a flaky: task fail its first attempts; SleepHeader makes a task slow.
package handlers
