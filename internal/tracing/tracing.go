// Package tracing carries W3C trace context (traceparent, tracestate) in
// a task's headers and starts onceq's spans through OpenTelemetry's API.
//
// onceq traces only where its caller does: Submit starts a span when its
// context holds one, and a worker starts spans for a task whose headers
// carry a traceparent. The spans go to OpenTelemetry's global
// TracerProvider (otel.SetTracerProvider); until a program sets one they
// are dropped, and nothing here links an SDK.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq"
)

// The W3C trace context headers a task carries.
const (
	ParentHeader = "traceparent"
	StateHeader  = "tracestate"
)

// Name is the instrumentation scope of onceq's spans.
const Name = "github.com/onceq/onceq"

var prop = propagation.TraceContext{}

// Tracer is onceq's tracer from the global TracerProvider.
func Tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(Name) }

// Traced reports whether ctx holds a span context worth carrying.
func Traced(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsValid() }

// Has reports whether headers carry a traceparent.
func Has(headers []onceq.Header) bool {
	for _, h := range headers {
		if h.Key == ParentHeader {
			return true
		}
	}
	return false
}

// Set returns headers with ctx's trace context in place of any they
// carried, leaving the slice passed in untouched; headers unchanged when
// ctx holds none.
func Set(ctx context.Context, headers []onceq.Header) []onceq.Header {
	if !Traced(ctx) {
		return headers
	}
	out := make([]onceq.Header, 0, len(headers)+2)
	for _, h := range headers {
		if h.Key != ParentHeader && h.Key != StateHeader {
			out = append(out, h)
		}
	}
	c := carrier{hs: &out}
	prop.Inject(ctx, c)
	return out
}

// Extract returns ctx with the remote span context that headers carry, or
// ctx when they carry none (or a malformed one).
func Extract(ctx context.Context, headers []onceq.Header) context.Context {
	if !Has(headers) {
		return ctx
	}
	return prop.Extract(ctx, carrier{hs: &headers})
}

// ExtractHTTP returns ctx with the remote span context that an HTTP
// request's headers carry (W3C traceparent and tracestate), or ctx when
// they carry none.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	if h.Get(ParentHeader) == "" {
		return ctx
	}
	return prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// carrier is a TextMapCarrier over task headers.
type carrier struct{ hs *[]onceq.Header }

func (c carrier) Get(key string) string {
	for _, h := range *c.hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c carrier) Set(key, value string) {
	for i, h := range *c.hs {
		if h.Key == key {
			(*c.hs)[i].Value = []byte(value)
			return
		}
	}
	*c.hs = append(*c.hs, onceq.Header{Key: key, Value: []byte(value)})
}

func (c carrier) Keys() []string {
	keys := make([]string, len(*c.hs))
	for i, h := range *c.hs {
		keys[i] = h.Key
	}
	return keys
}
