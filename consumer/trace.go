package consumer

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/internal/tracing"
)

// startSpans starts the spans of a traced task's run, as children of the
// trace its headers carry: "onceq wait", from when the task was due (or
// enqueued) to its start, and "onceq run", the handler's run, whose
// context the handler gets and whose emitted tasks and next steps carry
// on. A task whose traceparent does not parse runs untraced.
func startSpans(r *handlerRun, t *Task) {
	parent := tracing.Extract(context.Background(), t.Headers)
	if !tracing.Traced(parent) {
		return
	}
	tracer := tracing.Tracer()
	attrs := trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", t.Queue),
		attribute.String("onceq.task.id", t.ID), attribute.Int("onceq.task.attempt", t.Attempt),
		attribute.String("messaging.kafka.destination.partition", strconv.Itoa(int(t.Partition))), attribute.Int64("messaging.kafka.offset", t.Offset))
	since := t.Enqueued
	if t.Due.After(since) {
		since = t.Due
	}
	if !since.IsZero() && since.Before(t.started) {
		_, wait := tracer.Start(parent, "onceq wait "+t.Queue, trace.WithTimestamp(since), attrs)
		wait.End(trace.WithTimestamp(t.started))
	}
	t.trace, t.span = tracer.Start(parent, "onceq run "+t.Queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(t.started), attrs)
	r.ctx.values = t.trace
}

// endSpan ends a run's span with the run's outcome.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// startCommitSpan starts "onceq commit", a traced run's wait from its
// handler's end to the commit of its effects.
func startCommitSpan(t *Task) trace.Span {
	_, span := tracing.Tracer().Start(t.trace, "onceq commit "+t.Queue, trace.WithAttributes(attribute.String("onceq.task.id", t.ID)))
	return span
}

// commitSpans ends the commit spans of results a commit took, or notes
// on them that a commit aborted: the next one takes them.
func commitSpans(results []*result, committed bool) {
	for _, r := range results {
		switch {
		case r.commit == nil:
		case committed:
			r.commit.End()
			r.commit = nil
		default:
			r.commit.AddEvent("commit aborted: the next commit takes the result")
		}
	}
}
