package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestExpireKeepsRemarked marks IDs again while ExpireProcessed removes
// them. Every ID marked again stays in the store, and a call never returns
// an ID marked again before it started. Every other ID is removed and
// returned once.
func TestExpireKeepsRemarked(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	s := mustOpen(t, "/s", ClusterID("c1"), Group("g1"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	tps := []TP{{"a", 0}, {"a", 1}}
	now := time.Unix(1_700_000_000, 0)
	const n = 20_000
	id := func(i int) string { return fmt.Sprintf("id-%06d", i) }
	for _, tp := range tps {
		b := s.NewBatch()
		for i := 0; i < n; i++ {
			_ = b.MarkProcessed(tp, id(i), now.Add(-2*time.Hour))
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Events are ordered by clock: a span is [start, end].
	type span struct{ start, end int64 }
	var clock atomic.Int64
	type call struct {
		span
		removed []Removed
	}
	var calls []call
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c := call{span: span{start: clock.Add(1)}}
			r, err := s.ExpireProcessed(context.Background(), now, 3000)
			if err != nil {
				t.Error(err)
				return
			}
			c.end, c.removed = clock.Add(1), r
			calls = append(calls, c)
			if len(r) == 0 {
				return
			}
		}
	}()
	type tpID struct {
		tp TP
		id string
	}
	remarks := map[tpID][]span{}
	for round := 0; round < 50; round++ {
		b := s.NewBatch()
		var ids []Removed
		for k := 0; k < 20; k++ {
			r := Removed{TP: tps[rng.IntN(len(tps))], ID: id(rng.IntN(n))}
			ids = append(ids, r)
			_ = b.MarkProcessed(r.TP, r.ID, now)
		}
		sp := span{start: clock.Add(1)}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		sp.end = clock.Add(1)
		for _, r := range ids {
			remarks[tpID{r.TP, r.ID}] = append(remarks[tpID{r.TP, r.ID}], sp)
		}
	}
	wg.Wait()
	returned := map[tpID]bool{}
	for _, c := range calls {
		for _, r := range c.removed {
			k := tpID{r.TP, r.ID}
			for _, m := range remarks[k] {
				if m.end < c.start {
					t.Errorf("%v marked again in %v, returned by the call in %v", k, m, c.span)
				}
			}
			if returned[k] {
				t.Errorf("%v returned twice", k)
			}
			returned[k] = true
		}
	}
	for _, tp := range tps {
		for i := 0; i < n; i++ {
			r := tpID{tp, id(i)}
			ok, err := s.Has(tp, r.id)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case remarks[r] != nil && !ok:
				t.Errorf("%v was marked again but is gone", r)
			case remarks[r] == nil && ok:
				t.Errorf("%v is still there", r)
			case remarks[r] == nil && !returned[r]:
				t.Errorf("%v was removed but not returned", r)
			}
		}
	}
	if t.Failed() {
		t.Logf("%d calls, %d marked again", len(calls), len(remarks))
	}
}
