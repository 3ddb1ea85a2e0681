package producer

import (
	"context"
	"sync"
	"sync/atomic"
)

// admission bounds the tasks submitted and not yet acknowledged: a
// counting semaphore whose uncontended acquire and release are an atomic
// operation or two. Every task passes through it twice, once in the
// caller and once on the client's one callback goroutine.
type admission struct {
	max  int64
	held atomic.Int64

	waiters atomic.Int32 // acquirers in the slow path
	mu      sync.Mutex
	freed   chan struct{} // closed, and replaced, when a slot frees for waiters
}

func newAdmission(max int) *admission {
	return &admission{max: int64(max), freed: make(chan struct{})}
}

// tryAcquire takes a slot if one is free.
func (a *admission) tryAcquire() bool {
	for {
		n := a.held.Load()
		if n >= a.max {
			return false
		}
		if a.held.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// tryAcquireUpTo takes up to n free slots at once and returns how many:
// none when none is free.
func (a *admission) tryAcquireUpTo(n int64) int64 {
	for {
		held := a.held.Load()
		k := min(a.max-held, n)
		if k <= 0 {
			return 0
		}
		if a.held.CompareAndSwap(held, held+k) {
			return k
		}
	}
}

// acquire takes a slot, waiting for one until ctx ends.
func (a *admission) acquire(ctx context.Context) error {
	if a.tryAcquire() {
		return nil
	}
	a.waiters.Add(1)
	defer a.waiters.Add(-1)
	for {
		// waiters was raised before this look at held, and release lowers
		// held before it looks at waiters: either this sees the freed
		// slot, or that release closes the channel taken here.
		a.mu.Lock()
		freed := a.freed
		a.mu.Unlock()
		if a.tryAcquire() {
			return nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives n slots back.
func (a *admission) release(n int64) {
	a.held.Add(-n)
	if a.waiters.Load() > 0 {
		a.mu.Lock()
		close(a.freed)
		a.freed = make(chan struct{})
		a.mu.Unlock()
	}
}
