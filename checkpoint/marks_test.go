package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestMarkRecordsExpireWhole: the IDs of a commit's mark records are
// marked, restore through Apply to the same expiry records, and expire
// with one tombstone per record, keyed as the changelog record was; IDs
// marked one by one (a version 1 changelog) still expire one by one.
func TestMarkRecordsExpireWhole(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	var marks []Mark
	for i := range 5000 { // more than one record holds
		marks = append(marks, Mark{ID: fmt.Sprintf("id-%05d", i), At: now.Add(time.Duration(i%3) * time.Millisecond)})
	}
	marks = append(marks, Mark{ID: "late", At: now.Add(2 * time.Second)})
	entries := MarkRecords(marks)
	if len(entries) != 3 {
		t.Fatalf("%d records for 5000 IDs within 3 ms and one 2 s later, want 3 (4096 IDs at most each, a second apart)", len(entries))
	}
	var keys [][]byte
	for _, e := range entries {
		k, _ := e.Encode()
		keys = append(keys, k)
	}
	tp := TP{Topic: "q", Partition: 1}
	check := func(name string, s *Store) {
		t.Helper()
		for _, m := range []string{"id-00000", "id-04999", "late"} {
			if ok, err := s.Has(tp, m); err != nil || !ok {
				t.Fatalf("%s: %s not marked (%v)", name, m, err)
			}
		}
		removed, err := s.ExpireProcessed(context.Background(), now.Add(time.Hour+3*time.Second), 0)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]byte
		for _, r := range removed {
			if r.ID != "" || r.TP != tp {
				t.Errorf("%s: removed %+v: want whole records of %v", name, r, tp)
			}
			got = append(got, r.Tombstone)
		}
		slices.SortFunc(got, bytes.Compare)
		want := slices.SortedFunc(slices.Values(keys), bytes.Compare)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Errorf("%s: tombstones %x, want the records' keys %x", name, got, want)
		}
		if ok, _ := s.Has(tp, "id-02000"); ok {
			t.Errorf("%s: an expired ID is still marked", name)
		}
	}

	s := mustOpen(t, "/a", ClusterID("c"), Group("g"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	b := s.NewBatch()
	for _, e := range entries {
		if err := b.MarkRecord(tp, e.Marks); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	check("committed", s)

	// A restore from the changelog: the records, and a version 1 mark.
	r := mustOpen(t, "/b", ClusterID("c"), Group("g"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	var log []Entry
	for i, k := range keys {
		e, err := DecodeChangelog(k, mustValue(t, entries[i]))
		if err != nil {
			t.Fatal(err)
		}
		e.Offset = int64(i)
		log = append(log, e)
	}
	if err := r.Apply(tp, log, int64(len(log))); err != nil {
		t.Fatal(err)
	}
	check("restored", r)

	// A limit bounds the IDs one call examines: a record is returned by
	// the call that takes its last ID.
	l := mustOpen(t, "/l", ClusterID("c"), Group("g"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	b = l.NewBatch()
	for _, e := range entries {
		if err := b.MarkRecord(tp, e.Marks); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	var calls, tombstones int
	for ; calls < 10; calls++ {
		r, err := l.ExpireProcessed(context.Background(), now.Add(time.Hour+3*time.Second), 1500)
		if err != nil {
			t.Fatal(err)
		}
		tombstones += len(r)
		if ok, _ := l.Has(tp, "late"); !ok {
			break
		}
	}
	if calls+1 < 4 || tombstones != len(entries) {
		t.Errorf("%d calls of 1,500 IDs for %d IDs, %d tombstones: want at least 4 calls and %d tombstones", calls+1, len(marks), tombstones, len(entries))
	}

	old := mustOpen(t, "/c", ClusterID("c"), Group("g"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	if err := old.Apply(tp, []Entry{{Kind: KindMark, ID: "v1", At: now}}, 1); err != nil {
		t.Fatal(err)
	}
	removed, err := old.ExpireProcessed(context.Background(), now.Add(2*time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].ID != "v1" || !bytes.Equal(removed[0].Tombstone, EncodeMarkTombstone("v1")) {
		t.Errorf("a version 1 mark expired as %+v, want its own tombstone", removed)
	}
}

func mustValue(t *testing.T, e Entry) []byte {
	t.Helper()
	_, v := e.Encode()
	return v
}

// TestExpireHandsOverBeforeDeleting: Expire hands a chunk's tombstones
// over while the chunk's IDs are still marked. The worker relies on it: a
// task that runs because expiry deleted its ID is admitted after the
// hand-over, so the commit that marks the ID again also writes the
// tombstone of its old mark first, as a replay of the changelog needs.
func TestExpireHandsOverBeforeDeleting(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s := mustOpen(t, "/h", ClusterID("c"), Group("g"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	tp := TP{Topic: "q", Partition: 0}
	b := s.NewBatch()
	for i := range 3000 {
		// Half with records of their own (a version 1 changelog), half in
		// mark records.
		id := fmt.Sprintf("id-%04d", i)
		if i%2 == 0 {
			if err := b.MarkProcessed(tp, id, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	var marks []Mark
	for i := 1; i < 3000; i += 2 {
		marks = append(marks, Mark{ID: fmt.Sprintf("id-%04d", i), At: now})
	}
	for _, e := range MarkRecords(marks) {
		if err := b.MarkRecord(tp, e.Marks); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	var ids, records int
	n, err := s.Expire(context.Background(), now.Add(2*time.Hour), 0, func(rs []Removed) {
		for _, r := range rs {
			if r.ID == "" {
				records++
				continue
			}
			ids++
			// Has takes the store's read side, which the hand-over does
			// not hold; the chunk's deletions are not applied yet.
			if ok, err := s.Has(tp, r.ID); err != nil || !ok {
				t.Errorf("%s handed over after its deletion (marked %v, %v)", r.ID, ok, err)
			}
		}
	})
	if err != nil || n != 3000 || ids != 1500 || records != 1 {
		t.Fatalf("Expire deleted %d IDs (%v), handed over %d IDs and %d records; want 3000, 1500 and 1", n, err, ids, records)
	}
	if ok, _ := s.Has(tp, "id-0000"); ok {
		t.Error("an expired ID is still marked after Expire")
	}
}
