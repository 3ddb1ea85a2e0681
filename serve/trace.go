package serve

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
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

// requestIDHeader names a request on both ends, as lmstfy's does.
const requestIDHeader = "X-Request-ID"

// requestID answers every request with an X-Request-ID: the request's
// own, if it gave one that is short and printable, or a new one.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(requestIDHeader)
		if !validRequestID(id) {
			var b [16]byte
			binary.BigEndian.PutUint64(b[:8], rand.Uint64())
			binary.BigEndian.PutUint64(b[8:], rand.Uint64())
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set(requestIDHeader, id)
		next.ServeHTTP(w, r)
	})
}

// validRequestID says whether a client's request ID is kept: 1 to 128
// bytes of printable ASCII.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
