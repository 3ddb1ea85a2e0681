package control_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/inspect"
)

// open returns a controller over a new inspector of conn.
func open(t *testing.T, conn broker.Conn) *control.Controller {
	t.Helper()
	in, err := inspect.Open(inspect.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return control.New(in)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runner is a service with Run, as a worker and a delay service are.
type runner interface {
	Run(context.Context) error
}

// run makes a service with newFn and opts and runs it until the test
// ends.
func run[O any, S runner](t *testing.T, name string, newFn func(...O) (S, error), opts ...O) {
	t.Helper()
	s, err := newFn(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", name, err)
		}
	})
}
