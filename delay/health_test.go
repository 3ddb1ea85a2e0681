package delay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
)

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, timeout)
		}
	}
}

// TestServiceHealth pins issue 17's "/healthz answers ok while the broker
// is unreachable": the service is ready once it joined its group, and
// unhealthy when the brokers stop answering for its session timeout, and
// once it stopped.
func TestServiceHealth(t *testing.T) {
	testutil.NeedsEmbedded(t, "closes the broker under a running service")
	emb, conn := testutil.StartBroker(t, "")
	svc, err := delay.NewService(delay.Conn(conn), delay.WithPlanner(shortLadder(t)), delay.StateDir(t.TempDir()),
		delay.SessionTimeout(6*time.Second), delay.TransactionTimeout(2*time.Second), delay.Logger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if svc.Healthy() != nil || svc.Ready() == nil || !strings.Contains(svc.Ready().Error(), "not started") {
		t.Fatalf("before Run: healthy %v, ready %v", svc.Healthy(), svc.Ready())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	waitFor(t, 30*time.Second, "ready", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run: %v", err)
		default:
		}
		return svc.Ready() == nil
	})
	if err := svc.Healthy(); err != nil {
		t.Fatalf("running: %v", err)
	}
	emb.Close()
	waitFor(t, 20*time.Second, "unhealthy without a broker", func() bool {
		err := svc.Healthy()
		return err != nil && strings.Contains(err.Error(), "no response from the brokers")
	})
	cancel()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if err := svc.Healthy(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("after Run: %v", err)
	}
	if err := svc.Ready(); err == nil {
		t.Fatal("ready after Run returned")
	}
}
