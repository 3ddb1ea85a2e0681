package producer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAdmissionBoundsAndWakes: goroutines take and give back the slots of
// a small admission; never more than its size are held at once, and none
// is left waiting for a slot that was freed.
func TestAdmissionBoundsAndWakes(t *testing.T) {
	const size, workers, rounds = 3, 16, 2000
	a := newAdmission(size)
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := a.acquire(context.Background()); err != nil {
					t.Error(err)
					return
				}
				n := held.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				held.Add(-1)
				a.release(1)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("acquirers stuck with %d slots held", a.held.Load())
	}
	if p := peak.Load(); p > size || p < 1 {
		t.Fatalf("peak %d slots held at once, want 1 to %d", p, size)
	}
	if n := a.held.Load(); n != 0 {
		t.Fatalf("%d slots held after every release", n)
	}
}

// TestAdmissionWaitEndsWithContext: a full admission makes acquire wait
// until its context ends, and a release lets the next one in.
func TestAdmissionWaitEndsWithContext(t *testing.T) {
	a := newAdmission(1)
	if err := a.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := a.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire on a full admission: %v, want the context's deadline", err)
	}
	got := make(chan error, 1)
	go func() { got <- a.acquire(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	a.release(1)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a release did not wake the waiting acquire")
	}
}
