package compactsched

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestCompactsBacklogThenRests: a Pebble store of one compaction at a time
// whose writes pile sstables into L0 faster than one compaction takes them
// gets its compactions granted as places free up, L0 back under its
// threshold, and then the scheduler rests: no compaction waiting, no
// sampling. A second open of the same store registers a new scheduler.
func TestCompactsBacklogThenRests(t *testing.T) {
	dir := t.TempDir()
	open := func() (*pebble.DB, *Scheduler) {
		s := New()
		opts := &pebble.Options{
			MemTableSize:               256 << 10,
			L0CompactionThreshold:      2,
			L0StopWritesThreshold:      1000,
			CompactionConcurrencyRange: func() (int, int) { return 1, 1 },
			Logger:                     quiet{},
		}
		opts.Experimental.CompactionScheduler = s
		db, err := pebble.Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		return db, s
	}
	db, s := open()
	value := make([]byte, 1024)
	refused := func() uint64 { s.mu.Lock(); defer s.mu.Unlock(); return s.refused }
	// Each flush an sstable over the whole key range: compactions pile
	// up behind the one running.
	for f := 0; refused() == 0; f++ {
		if f == 1000 {
			t.Fatal("1,000 flushes and no compaction was refused a place: the test did not pile L0 up")
		}
		b := db.NewBatch()
		for i := range 300 {
			if err := b.Set(fmt.Appendf(nil, "key-%06d", (i*7919+f*13)%20000), value, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		s.mu.Lock()
		waiting, running := s.waiting, s.running
		s.mu.Unlock()
		l0 := db.Metrics().Levels[0].TablesCount
		if !waiting && running == 0 && l0 < 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: waiting %v, %d running, %d sstables in L0 (%d refusals); want the backlog compacted and the scheduler resting", waiting, running, l0, refused())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	default:
		t.Fatal("the sampler runs on after the store closed")
	}

	db, _ = open()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
