package tracing

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestSetAndExtract(t *testing.T) {
	in := []onceq.Header{{Key: "a", Value: []byte("1")}, {Key: ParentHeader, Value: []byte(parent)}}
	ctx := Extract(context.Background(), in)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
		t.Fatalf("extracted %+v", sc)
	}

	// Set replaces the trace the headers carried and keeps the rest,
	// without writing into the caller's slice.
	other := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled}))
	orig := slices.Clone(in)
	out := Set(other, in)
	if !slices.EqualFunc(in, orig, func(a, b onceq.Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
		t.Fatalf("Set wrote into its input: %v", in)
	}
	if len(out) != 2 || out[0].Key != "a" || out[1].Key != ParentHeader ||
		string(out[1].Value) != "00-01000000000000000000000000000000-0200000000000000-01" {
		t.Fatalf("Set: %v", out)
	}
	if got := Set(context.Background(), in); len(got) != 2 || string(got[1].Value) != parent {
		t.Fatalf("Set with no trace changed the headers: %v", got)
	}

	// A traceparent that does not parse is ignored, as W3C Trace Context
	// asks.
	for _, bad := range []string{"", "00-not-a-trace-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "ff-" + parent[3:]} {
		if Traced(Extract(context.Background(), []onceq.Header{{Key: ParentHeader, Value: []byte(bad)}})) {
			t.Errorf("traceparent %q was taken", bad)
		}
	}
	if Has(nil) || !Has(in) {
		t.Error("Has")
	}
}

// FuzzExtract: any traceparent and tracestate a record carries either
// yields no trace or one that Set writes back to the same trace.
func FuzzExtract(f *testing.F) {
	f.Add(parent, "rojo=00f067aa0ba902b7")
	f.Add("00-not-a-trace-01", "")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		ctx := Extract(context.Background(), []onceq.Header{{Key: ParentHeader, Value: []byte(tp)}, {Key: StateHeader, Value: []byte(ts)}})
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() {
			return
		}
		back := trace.SpanContextFromContext(Extract(context.Background(), Set(ctx, nil)))
		if back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || back.TraceFlags() != sc.TraceFlags() {
			t.Fatalf("%q: %+v written back as %+v", tp, sc, back)
		}
	})
}
