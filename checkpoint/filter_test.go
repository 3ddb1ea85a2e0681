package checkpoint

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestStateFilterNeverHidesAKey commits state keys while readers look the
// last committed one up, with filters small enough to be rebuilt over and
// over: a Get must always find what a commit made durable, whether the
// filter it asked was built before, during or after that commit.
func TestStateFilterNeverHidesAKey(t *testing.T) {
	defer func(n int64) { filterMinKeys = n }(filterMinKeys)
	filterMinKeys = 64
	s := mustOpen(t, "/s", testOptions(t, vfs.NewMem())...)
	tp := TP{"q", 0}
	const n = 3000
	var last atomic.Int64
	last.Store(-1)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := last.Load()
				if i < 0 {
					continue
				}
				if _, ok, err := s.Get(tp, []byte(fmt.Sprint("k", i))); err != nil || !ok {
					errs <- fmt.Errorf("key k%d committed, Get = %v, %v", i, ok, err)
					return
				}
			}
		}()
	}
	for i := range n {
		b := s.NewBatch()
		if err := b.Set(tp, []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		last.Store(int64(i))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The filter a Get uses: one that filled while the readers were not
	// scheduled is rebuilt by the next Get, as here.
	p := s.lookup(tp)
	f, err := s.stateFilter(p)
	if err != nil {
		t.Fatal(err)
	}
	if f.sized <= 64 {
		t.Fatalf("filter %+v after %d keys: want one rebuilt bigger than its first size", f, n)
	}
	// Keys never set are answered from the filter, nearly all of them.
	misses := 0
	for i := range 10_000 {
		if f.mayContain(keyHash([]byte(fmt.Sprint("absent", i)))) {
			misses++
		}
	}
	if misses > 500 {
		t.Errorf("%d of 10,000 absent keys pass the filter, want about 1%%", misses)
	}
	for i := range n {
		if _, ok, err := s.Get(tp, []byte(fmt.Sprint("k", i))); err != nil || !ok {
			t.Fatalf("k%d: %v, %v", i, ok, err)
		}
	}
}

// TestStateFilterAfterReopen builds the filter from what the store holds,
// ahead of the first Get.
func TestStateFilterAfterReopen(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("/s", testOptions(t, fs)...)
	if err != nil {
		t.Fatal(err)
	}
	tp := TP{"q", 3}
	b := s.NewBatch()
	for i := range 100 {
		if err := b.Set(tp, []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = mustOpen(t, "/s", testOptions(t, fs)...)
	if err := s.WarmState(tp); err != nil {
		t.Fatal(err)
	}
	if f := s.lookup(tp).filter.Load(); f == nil || f.added.Load() != 100 {
		t.Fatalf("filter after WarmState: %+v, want one with the 100 keys", f)
	}
	for i := range 100 {
		if _, ok, err := s.Get(tp, []byte(fmt.Sprint("k", i))); err != nil || !ok {
			t.Fatalf("k%d after reopening: %v, %v", i, ok, err)
		}
	}
	if _, ok, _ := s.Get(tp, []byte("k100")); ok {
		t.Fatal("k100 found, never set")
	}
}

// TestKeyFilterHoldsItsRateUntilRebuilt fills filters of several sizes
// with as many keys as they take before a Get rebuilds them: up to then,
// absent keys must pass at about the 1% the filter is built for.
func TestKeyFilterHoldsItsRateUntilRebuilt(t *testing.T) {
	for _, size := range []int64{filterMinKeys, 1500, 3000, 50_000} {
		f := newKeyFilter(size)
		for i := 0; ; i++ {
			f.add(keyHash([]byte(fmt.Sprint("k", i))))
			if f.overfull() {
				break
			}
		}
		passed := 0
		const probes = 20_000
		for i := range probes {
			if f.mayContain(keyHash([]byte(fmt.Sprint("absent", i)))) {
				passed++
			}
		}
		if rate := float64(passed) / probes; rate > 0.02 {
			t.Errorf("filter sized for %d keys, holding %d when a Get would rebuild it: %.1f%% of absent keys pass, want about 1%%",
				size, f.added.Load(), 100*rate)
		}
	}
}
