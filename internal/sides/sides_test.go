package sides_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/sides"
	"github.com/onceq/onceq/internal/testutil"
)

// running is a Run in the background.
type running struct {
	t    *testing.T
	set  *sides.Set
	done chan error
}

// runSet runs set in the background.
func runSet(t *testing.T, ctx context.Context, set *sides.Set, after <-chan struct{}) *running {
	r := &running{t: t, set: set, done: make(chan error, 1)}
	go func() { r.done <- set.Run(ctx, after) }()
	return r
}

// wait waits for Run's error, failing the test after timeout.
func (r *running) wait(timeout time.Duration) error {
	r.t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(timeout):
		r.t.Fatalf("Run still running after %v; health: %v", timeout, r.set.Healthy())
		return nil
	}
}

// TestFailedServiceStopsTheOthers pins the failure policy: a delay
// service that cannot keep its state (a file where its state dir goes)
// stops the workflow service and the scheduler beside it, and Run
// returns an error naming it, without waiting for its context; the
// set's probes name it.
func TestFailedServiceStopsTheOthers(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "delay"), []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := sides.New(sides.Config{Conn: conn, Dir: dir, Delay: true, Workflow: true, Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(set.Services()); got != 3 {
		t.Fatalf("%d services, want 3", got)
	}
	err = runSet(t, t.Context(), set, nil).wait(3 * time.Minute)
	if err == nil || !strings.HasPrefix(err.Error(), "the delay service stopped: delay: state dir:") {
		t.Fatalf("Run: %v; want the delay service's failure, named", err)
	}
	if strings.Contains(err.Error(), "workflow") || strings.Contains(err.Error(), "scheduler") {
		t.Fatalf("Run: %v; the services stopped because of the delay service's failure are no failures of their own", err)
	}
	for _, svc := range set.Services() {
		if svc.Ready() == nil {
			t.Errorf("%s is ready after Run returned: it was not stopped", svc.Name)
		}
	}
	if h := set.Healthy(); h == nil || !strings.Contains(h.Error(), "delay: delay: stopped: delay: state dir:") {
		t.Fatalf("Healthy: %v; want the delay service named, with its error", h)
	}
	if r := set.Ready(); r == nil || !strings.HasPrefix(r.Error(), "delay: ") {
		t.Fatalf("Ready: %v; want the delay service named first", r)
	}
}

// TestRunUntilContextEnds: the three services start once after is
// closed, keep their state under Dir, report ready, and stop without an
// error when the context ends.
func TestRunUntilContextEnds(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	dir := t.TempDir()
	set, err := sides.New(sides.Config{Conn: conn, Dir: dir, Delay: true, Workflow: true, Scheduler: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	after := make(chan struct{})
	run := runSet(t, ctx, set, after)
	close(after)
	for deadline := time.Now().Add(3 * time.Minute); set.Ready() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 3 minutes: %v", set.Ready())
		}
	}
	if err := set.Healthy(); err != nil {
		t.Fatalf("Healthy while running: %v", err)
	}
	for _, d := range []string{"delay", "workflow"} {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || !fi.IsDir() {
			t.Errorf("no state dir %s under Dir: %v", d, err)
		}
	}
	cancel()
	if err := run.wait(2 * time.Minute); err != nil {
		t.Fatalf("Run after its context ended: %v, want nil", err)
	}
}

// TestRunWaitsForAfter: a context that ends before after is closed
// starts no service, and a set without services waits for its context
// (a command that runs it beside its work takes any return for a stop).
func TestRunWaitsForAfter(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	set, err := sides.New(sides.Config{Conn: conn, Delay: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := runSet(t, ctx, set, make(chan struct{})).wait(time.Minute); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r := set.Ready(); r == nil || !strings.Contains(r.Error(), "not started") {
		t.Fatalf("Ready: %v; want the delay service not started", r)
	}

	none, err := sides.New(sides.Config{Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	run := runSet(t, ctx, none, nil)
	select {
	case err := <-run.done:
		t.Fatalf("Run without services returned %v before its context ended", err)
	default:
	}
	cancel()
	if err := run.wait(time.Minute); err != nil {
		t.Fatalf("Run without services: %v", err)
	}
}
