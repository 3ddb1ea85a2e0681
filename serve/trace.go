package serve

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/internal/tracing"
)

// traceRequest starts the server span of an API request that carries a
// W3C traceparent, as a child of the caller's span: the tasks the request
// submits carry it on to their handlers. end ends it with the answer's
// status. A traceparent that does not parse leaves the request untraced.
func traceRequest(r *http.Request, rt route) (*http.Request, func(status int)) {
	ctx := tracing.ExtractHTTP(r.Context(), r.Header)
	if !tracing.Traced(ctx) {
		return r, func(int) {}
	}
	ctx, span := tracing.Tracer().Start(ctx, "onceq serve "+rt.name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", rt.path)))
	return r.WithContext(ctx), func(status int) {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
		span.End()
	}
}
