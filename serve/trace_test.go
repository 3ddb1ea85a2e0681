package serve_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
	"github.com/onceq/onceq/workflow"
)

// TestTraceFromPublish publishes a chain of two steps over HTTP with a W3C
// traceparent, the OpenTelemetry SDK's in-memory exporter as the global
// provider. The first step fails its first attempt and comes back through
// a delay bucket. Both handlers, all three runs, must see spans of the
// caller's trace, under the server's span of the publish.
func TestTraceFromPublish(t *testing.T) {
	tp, exp := testutil.Tracing(t)

	a := start(t, serve.CreateQueues(2))
	tok := a.token("shop", false)

	// The publish creates the queue; the workers start after it.

	rctx, root := tp.Tracer("test").Start(context.Background(), "client")
	req, err := http.NewRequestWithContext(rctx, "POST", a.url+"/api/shop/orders/bulk",
		strings.NewReader(`[{"id":"traced","chain":[{"payload":"a"},{"payload":"b"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Token", tok)
	propagation.TraceContext{}.Inject(rctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	root.End()
	if resp.StatusCode != 201 {
		t.Fatalf("bulk publish: %d", resp.StatusCode)
	}
	var (
		mu   sync.Mutex
		runs = map[string]trace.SpanContext{}
	)
	ranB := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	w, err := consumer.New(consumer.Conn(a.conn), consumer.Queues("shop.orders"), consumer.CheckpointDir(filepath.Join(dir, "w")),
		consumer.Backoff(100*time.Millisecond, 1, 100*time.Millisecond), consumer.CommitInterval(10*time.Millisecond),
		consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			mu.Lock()
			runs[string(task.Payload)+"#"+string(rune('0'+task.Attempt))] = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			switch {
			case string(task.Payload) == "a" && task.Attempt == 1:
				return errors.New("the first attempt fails")
			case string(task.Payload) == "b":
				close(ranB)
			}
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := workflow.NewService(workflow.Conn(a.conn), workflow.Dir(filepath.Join(dir, "wf")))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := delay.NewService(delay.Conn(a.conn), delay.StateDir(filepath.Join(dir, "delay")), delay.CommitInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	for _, run := range []func(context.Context) error{w.Run, svc.Run, ds.Run} {
		go func() {
			err := run(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("run: %v", err)
			}
			done <- err
		}()
	}
	defer func() {
		cancel()
		for range 3 {
			<-done
		}
	}()

	select {
	case <-ranB:
	case <-time.After(time.Minute):
		mu.Lock()
		t.Fatalf("the second step did not run within a minute; runs %v", runs)
	}

	want := root.SpanContext().TraceID()
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"a#1", "a#2", "b#1"} {
		if sc, ok := runs[k]; !ok || sc.TraceID() != want {
			t.Errorf("run %s: span %v (ran: %v), want one of trace %s", k, sc, ok, want)
		}
	}
	var server sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "onceq serve bulk" {
			server = s
		}
	}
	if server == nil || server.Parent().SpanID() != root.SpanContext().SpanID() || server.SpanKind() != trace.SpanKindServer {
		t.Fatalf("the server's span of the publish: %v, want a server span under the client's", server)
	}

	// A traceparent that does not parse is ignored, as W3C Trace Context
	// asks: the publish succeeds, untraced.
	served := func() int {
		n := 0
		for _, s := range exp.GetSpans() {
			if strings.HasPrefix(s.Name, "onceq serve ") {
				n++
			}
		}
		return n
	}
	before := served()
	req, err = http.NewRequest("PUT", a.url+"/api/shop/orders?id=untraced", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Token", tok)
	req.Header.Set("traceparent", "00-not-a-trace-01")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || served() != before {
		t.Errorf("publish with a malformed traceparent: %d, %d server spans more; want 201 and none", resp.StatusCode, served()-before)
	}
}
