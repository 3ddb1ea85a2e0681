package control_test

import (
	"context"
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
