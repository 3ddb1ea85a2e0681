package producer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/tracing"
)

// traceSubmit starts the span of a submission whose context is traced,
// carries it in the task's traceparent (unless the task names a trace of
// its own) and returns the context and a callback that end it with the
// submission's outcome.
func traceSubmit(ctx context.Context, task *onceq.Task, fn func(Receipt, error)) (context.Context, func(Receipt, error)) {
	ctx, span := tracing.Tracer().Start(ctx, "onceq submit "+task.Queue, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", task.Queue)))
	if !tracing.Has(task.Headers) {
		task.Headers = tracing.Set(ctx, task.Headers)
	}
	return ctx, func(r Receipt, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		if r.ID != "" {
			span.SetAttributes(attribute.String("onceq.task.id", r.ID))
		}
		span.End()
		fn(r, err)
	}
}

// traceTx starts the span of a transaction whose context is traced: its
// tasks carry it. end ends it with the transaction's outcome.
func traceTx(ctx context.Context) (context.Context, func(error)) {
	ctx, span := tracing.Tracer().Start(ctx, "onceq submit transaction", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "kafka")))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
