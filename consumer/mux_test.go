package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/consumer/consumertest"
)

func kitTask(id, queue string, payload string) *consumer.Task {
	return consumertest.NewTask(onceq.Task{ID: id, Queue: queue, Payload: []byte(payload)}).Consumer()
}

func TestMuxRoutesByQueue(t *testing.T) {
	var got []string
	mux := consumer.NewMux()
	mux.RouteFunc("a", func(ctx context.Context, t *consumer.Task) error { got = append(got, "a:"+t.ID); return nil })
	mux.Route("b", consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error { got = append(got, "b:"+t.ID); return nil }))
	for _, tk := range []*consumer.Task{kitTask("1", "a", ""), kitTask("2", "b", ""), kitTask("3", "a", "")} {
		if err := mux.Handle(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
	}
	if s := strings.Join(got, ","); s != "a:1,b:2,a:3" {
		t.Fatalf("routed %s", s)
	}
}

func TestMuxUnknownQueueSkipsRetry(t *testing.T) {
	mux := consumer.NewMux()
	mux.RouteFunc("a", func(ctx context.Context, t *consumer.Task) error { return nil })
	err := mux.Handle(context.Background(), kitTask("x", "zzz", ""))
	if !consumer.IsSkipRetry(err) || !strings.Contains(err.Error(), `"zzz"`) || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("got %v", err)
	}
}

func TestMuxWithMiddleware(t *testing.T) {
	var trace []string
	mw := func(name string) consumer.Middleware {
		return func(next consumer.Handler) consumer.Handler {
			return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
				trace = append(trace, name)
				return next.Handle(ctx, t)
			})
		}
	}
	inner := consumer.NewMux()
	inner.Route("a", consumer.Chain(consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		trace = append(trace, "handler")
		return errors.New("boom")
	}), mw("route")))
	h := consumer.Chain(inner, mw("outer"))
	if err := h.Handle(context.Background(), kitTask("1", "a", "")); err == nil || err.Error() != "boom" {
		t.Fatalf("got %v", err)
	}
	if s := strings.Join(trace, ","); s != "outer,route,handler" {
		t.Fatalf("trace %s", s)
	}
}

func TestMuxRoutePanics(t *testing.T) {
	for name, f := range map[string]func(m *consumer.Mux){
		"empty queue": func(m *consumer.Mux) { m.RouteFunc("", func(context.Context, *consumer.Task) error { return nil }) },
		"nil handler": func(m *consumer.Mux) { m.Route("a", nil) },
		"nil func":    func(m *consumer.Mux) { m.RouteFunc("a", nil) },
		"twice": func(m *consumer.Mux) {
			m.RouteFunc("a", func(context.Context, *consumer.Task) error { return nil })
			m.RouteFunc("a", func(context.Context, *consumer.Task) error { return nil })
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f(consumer.NewMux())
		})
	}
}
