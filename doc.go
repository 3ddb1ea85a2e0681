// Package onceq holds what every part of onceq shares: the Task, its wire
// format on Kafka records, validation, and the typed errors that describe
// bad input.
//
// A task is a plain Kafka record. The key is the partition key (the task ID
// when none is given; a lane queue's task's queue and ID, "fn/resize/<ID>"),
// the value is the payload, and onceq's fields travel
// as headers with ASCII values: onceq-id, onceq-queue, onceq-due,
// onceq-expires, onceq-attempt, onceq-max-attempts, onceq-timeout,
// onceq-enqueued and onceq-error. Times are unix milliseconds, durations
// milliseconds. Any Kafka client can produce and read onceq tasks; other
// headers pass through untouched.
//
// Validation errors are *Error values that name the field, the value and
// the fix, and wrap a kind that errors.Is matches:
//
//	t := onceq.Task{Queue: "onceq-internal", Payload: []byte("hi")}
//	if err := t.Validate(0); errors.Is(err, onceq.ErrReservedQueue) {
//		// onceq: queue "onceq-internal": reserved queue name: ...
//	}
//
// Validate and FromRecord share the wire format's limits (MaxIDLen,
// MaxAttemptCount, MaxUnixMilli): a task Validate accepts is a record
// every worker decodes. A header with the onceq- prefix that the wire
// format does not define is malformed on both sides.
//
// People write tasks as a Spec, from flags or from a JSON line
// (ParseLine); Spec.Task checks it and builds the Task.
//
// The producer, consumer and delay packages build on this one; see their
// documentation for submitting and running tasks.
package onceq
