package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
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

// markRecords commits marks in tp as a worker does, in mark records, and
// returns the changelog keys of the records.
func markRecords(t *testing.T, s *Store, tp TP, marks []Mark) [][]byte {
	t.Helper()
	b := s.NewBatch()
	var keys [][]byte
	for _, e := range MarkRecords(marks) {
		if err := b.MarkRecord(tp, e.Marks); err != nil {
			t.Fatal(err)
		}
		k, _ := e.Encode()
		keys = append(keys, k)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestExpireScansBareMarkRecords: a mark record's entry in the store is
// bare (the IDs live only in their keys). Expiry hands the record over for
// its tombstone once it is due, while its IDs are still marked, and then
// deletes the IDs by their own times, a bounded number of keys a call,
// going on where the last call stopped. An ID marked again later stays
// until its newer record is due. A record written with its IDs, as stores
// did before, still expires when its last ID goes.
func TestExpireScansBareMarkRecords(t *testing.T) {
	defer func(n int) { expireScanKeys = n }(expireScanKeys)
	expireScanKeys = 100
	now := time.UnixMilli(1_700_000_000_000)
	later := now.Add(2 * time.Hour)
	s := mustOpen(t, "/s", ClusterID("c"), Group("g"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	tp, old := TP{Topic: "q", Partition: 0}, TP{Topic: "q", Partition: 1}
	id := func(i int) string { return fmt.Sprintf("id-%04d", i) }
	var marks []Mark
	for i := range 1000 {
		marks = append(marks, Mark{ID: id(i), At: now})
	}
	first := markRecords(t, s, tp, marks)
	second := markRecords(t, s, tp, []Mark{{ID: id(5), At: later}, {ID: "fresh", At: later}})
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("%d and %d records, want 1 and 1", len(first), len(second))
	}
	// A store written before mark records went bare: the record with its
	// IDs, under the same key.
	b := s.NewBatch()
	p, err := b.partition(old)
	if err != nil {
		t.Fatal(err)
	}
	oldMarks := []Mark{{ID: "o1", At: now}, {ID: "o2", At: now}}
	at, v, sum := markRecord(oldMarks)
	for _, m := range oldMarks {
		if err := b.pb.Set(appendIDKey(nil, p.h, m.ID), encodeIDValue(nil, millis(m.At)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.pb.Set(expiryKey(p.h, at, sum), v, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	oldKey, _ := EncodeMarks(oldMarks)

	lower, upper := familyBounds(s.lookup(tp).h, familyExpiry)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		t.Fatal(err)
	}
	records := 0
	for ok := it.First(); ok; ok = it.Next() {
		records++
		if len(it.Value()) != 0 {
			t.Errorf("a mark record's entry holds %d bytes, want none", len(it.Value()))
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if records != 2 {
		t.Errorf("%d expiry records, want 2", records)
	}

	has := func(tp TP, id string) bool {
		t.Helper()
		ok, err := s.Has(tp, id)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	handed := map[string]bool{}
	expire := func(at time.Time) (calls int) {
		t.Helper()
		for calls = 1; calls < 100; calls++ {
			n, err := s.Expire(context.Background(), at, 10_000, func(rs []Removed) {
				for _, r := range rs {
					if r.ID != "" {
						t.Errorf("removed ID %q with a tombstone of its own, want whole records", r.ID)
					}
					if handed[string(r.Tombstone)] {
						t.Errorf("record %x handed over twice", r.Tombstone)
					}
					handed[string(r.Tombstone)] = true
					// Handed over before its IDs go.
					if ok, _ := s.Has(tp, id(999)); !ok && string(r.Tombstone) == string(first[0]) {
						t.Errorf("record %x handed over after its IDs were deleted", r.Tombstone)
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return calls
			}
		}
		t.Fatalf("Expire still deleting after %d calls", calls)
		return calls
	}

	// A scan that read an ID's old time, and a commit that marks it again
	// before the scan's chunk deletes it: the chunk reads the time again.
	h := s.lookup(tp)
	stale := []expiryEntry{{ID: id(5), At: millis(now), logged: true}}
	if n, err := s.expireChunk(h, millis(now.Add(time.Second)), stale, nil, false, func([]Removed) {}); err != nil || n != 0 || !has(tp, id(5)) {
		t.Errorf("a chunk with %s's old time deleted %d IDs (%v), %s marked %v: want none deleted", id(5), n, err, id(5), has(tp, id(5)))
	}

	if calls := expire(now.Add(time.Hour + 2*time.Second)); calls < 10 {
		t.Errorf("%d calls deleted 1,001 IDs, %d keys a call: want at least 10", calls, expireScanKeys)
	}
	if !handed[string(first[0])] || !handed[string(oldKey)] || len(handed) != 2 {
		t.Errorf("handed over %d records, want the first (%v) and the old one (%v)", len(handed), handed[string(first[0])], handed[string(oldKey)])
	}
	for _, m := range []string{id(0), id(999), id(500)} {
		if has(tp, m) {
			t.Errorf("%s is still marked after its window", m)
		}
	}
	if has(old, "o1") || has(old, "o2") {
		t.Error("the IDs of a record written with its IDs are still marked")
	}
	if !has(tp, id(5)) || !has(tp, "fresh") {
		t.Errorf("IDs marked later are gone: %s %v, fresh %v", id(5), has(tp, id(5)), has(tp, "fresh"))
	}

	expire(later.Add(time.Hour + 2*time.Second))
	if !handed[string(second[0])] || has(tp, id(5)) || has(tp, "fresh") {
		t.Errorf("the later record: handed over %v, %s marked %v, fresh marked %v; want handed over and both gone",
			handed[string(second[0])], id(5), has(tp, id(5)), has(tp, "fresh"))
	}
}

// TestExpireScanKeepsRemarked marks IDs of mark records again while Expire
// scans them out: each ID marked again stays, every other goes.
func TestExpireScanKeepsRemarked(t *testing.T) {
	defer func(n int) { expireScanKeys = n }(expireScanKeys)
	expireScanKeys = 500
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	s := mustOpen(t, "/s", ClusterID("c1"), Group("g1"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	tp := TP{"a", 0}
	now := time.Unix(1_700_000_000, 0)
	const n = 20_000
	id := func(i int) string { return fmt.Sprintf("id-%06d", i) }
	var marks []Mark
	for i := range n {
		marks = append(marks, Mark{ID: id(i), At: now.Add(-2 * time.Hour)})
	}
	markRecords(t, s, tp, marks)
	done := make(chan error, 1)
	go func() {
		for {
			d, err := s.Expire(context.Background(), now, 3000, func([]Removed) {})
			if err != nil || d == 0 {
				done <- err
				return
			}
		}
	}()
	remarked := map[string]bool{}
	for range 50 {
		var again []Mark
		for range 20 {
			i := rng.IntN(n)
			remarked[id(i)] = true
			again = append(again, Mark{ID: id(i), At: now})
		}
		markRecords(t, s, tp, again)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Calls after the marks: the scan may have passed an ID before it was
	// marked again, and must not take it now.
	if _, err := s.Expire(context.Background(), now, 0, func([]Removed) {}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ok, err := s.Has(tp, id(i))
		if err != nil {
			t.Fatal(err)
		}
		if ok != remarked[id(i)] {
			t.Errorf("%s: marked %v, marked again %v", id(i), ok, remarked[id(i)])
		}
	}
}

// TestExpireScanGoesRound: a call without a limit scans every ID, also
// those before where a limited call's scan stopped.
func TestExpireScanGoesRound(t *testing.T) {
	defer func(n int) { expireScanKeys = n }(expireScanKeys)
	expireScanKeys = 100
	now := time.UnixMilli(1_700_000_000_000)
	s := mustOpen(t, "/s", ClusterID("c"), Group("g"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	tp := TP{Topic: "q", Partition: 0}
	var marks []Mark
	for i := range 300 { // every other ID ten minutes later
		marks = append(marks, Mark{ID: fmt.Sprintf("id-%03d", i), At: now.Add(time.Duration(i%2) * 10 * time.Minute)})
	}
	markRecords(t, s, tp, marks)
	if n, err := s.Expire(context.Background(), now.Add(time.Hour+2*time.Second), 10_000, func([]Removed) {}); err != nil || n == 0 || n > 50 {
		t.Fatalf("a call of %d keys deleted %d IDs (%v), want 1 to 50", expireScanKeys, n, err)
	}
	n, err := s.Expire(context.Background(), now.Add(time.Hour+10*time.Minute+2*time.Second), 0, func([]Removed) {})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range marks {
		if ok, err := s.Has(tp, m.ID); err != nil || ok {
			t.Errorf("%s still marked (%v) after a call without a limit deleted %d", m.ID, err, n)
		}
	}
}

// TestExpireScanRestsWhenNothingDue: the scan reads no ID keys once every
// ID of the records taken is gone, and a store reopened after a walk took
// records whose IDs the scan had not reached still scans them out.
func TestExpireScanRestsWhenNothingDue(t *testing.T) {
	defer func(n int) { expireScanKeys = n }(expireScanKeys)
	expireScanKeys = 100
	now := time.UnixMilli(1_700_000_000_000)
	fs := vfs.NewMem()
	opts := []Opt{ClusterID("c"), Group("g"), FS(fs), DedupWindow(time.Hour), NoSync()}
	s := mustOpen(t, "/s", opts...)
	tp := TP{Topic: "q", Partition: 0}
	var marks []Mark
	for i := range 300 {
		marks = append(marks, Mark{ID: fmt.Sprintf("id-%03d", i), At: now})
	}
	markRecords(t, s, tp, marks)
	handed := 0
	at := now.Add(time.Hour + 2*time.Second)
	if n, err := s.Expire(context.Background(), at, 10_000, func(rs []Removed) { handed += len(rs) }); err != nil || n == 0 || n >= len(marks) || handed != 1 {
		t.Fatalf("the first call deleted %d IDs (%v) and handed over %d records, want some IDs and the record", n, err, handed)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, "/s", opts...)
	later := now.Add(2 * time.Hour)
	markRecords(t, s, tp, []Mark{{ID: "fresh", At: later}})
	for i := range 10 {
		at = at.Add(time.Minute)
		if _, err := s.Expire(context.Background(), at, 10_000, func([]Removed) {}); err != nil {
			t.Fatal(err)
		}
		s.expireMu.Lock()
		scanned := s.expireScanned
		s.expireMu.Unlock()
		if i < 8 {
			continue
		}
		if i == 8 {
			for _, m := range marks {
				if ok, err := s.Has(tp, m.ID); err != nil || ok {
					t.Fatalf("%s still marked (%v) after the reopened store's calls", m.ID, err)
				}
			}
			s.expireMu.Lock()
			s.expireScanned = 0
			s.expireMu.Unlock()
			continue
		}
		if scanned != 0 {
			t.Errorf("a call with nothing due read %d ID keys, want none", scanned)
		}
	}
	if ok, err := s.Has(tp, "fresh"); err != nil || !ok {
		t.Errorf("fresh marked %v (%v), want marked", ok, err)
	}
}
