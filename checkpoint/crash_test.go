package checkpoint

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

var (
	seedFlag   = flag.Uint64("seed", 0, "seed of the randomized tests (0: a new one); each test prints the seed it used")
	roundsFlag = flag.Int("rounds", 12, "rounds of each randomized crash test")
)

// testSeed returns the seed given with -seed or a new one, and logs it.
func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay: go test ./checkpoint -run '^%s$' -seed %d)", seed, t.Name(), seed)
	return seed
}

var crashTPs = []TP{{"orders", 0}, {"orders", 1}, {"payments", 7}}

// crashBatchIDs returns how many IDs batch n marks in each partition.
func crashBatchIDs(seed uint64, n int) int {
	return 1 + rand.New(rand.NewPCG(seed, uint64(n))).IntN(300)
}

func crashID(n, j int) string { return fmt.Sprintf("%08d-%04d", n, j) }

// TestCrashCommits commits batches that each write to three partitions
// while the filesystem is cloned as a crash would leave it, with some or
// none of the unsynced data. The clone must open, and hold exactly the
// batches 1..m for some m: never part of a batch. With synced commits, m
// covers at least every commit that returned before the crash.
func TestCrashCommits(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("nosync=%v", noSync), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(testSeed(t), 0))
			for round := 0; round < *roundsFlag; round++ {
				crashCommitsRound(t, rng, noSync)
			}
		})
	}
}

func crashCommitsRound(t *testing.T, rng *rand.Rand, noSync bool) {
	fs := vfs.NewCrashableMem()
	opts := []Opt{ClusterID("c1"), Group("g1"), MemTableSize(1 << 20), Logger(testLogger(t))}
	if noSync {
		opts = append(opts, NoSync())
	}
	s, err := Open("/s", append(opts, FS(fs))...)
	if err != nil {
		t.Fatal(err)
	}
	idSeed, total := rng.Uint64(), 20+rng.IntN(60)
	crashAfter := rng.IntN(total)
	unsynced := 0
	if rng.IntN(2) == 0 {
		unsynced = rng.IntN(101)
	}
	cloneRNG := rand.New(rand.NewPCG(rng.Uint64(), 0))

	var acked atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; n <= total; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := commitCrashBatch(s, idSeed, n); err != nil {
				t.Error(err)
				return
			}
			acked.Store(int64(n))
		}
	}()
	for acked.Load() < int64(crashAfter) {
		time.Sleep(50 * time.Microsecond)
	}
	before := int(acked.Load())
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: cloneRNG})
	close(stop)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open("/s", append(opts, FS(clone))...)
	if err != nil {
		t.Fatalf("open after crash (unsynced %d%%): %v", unsynced, err)
	}
	defer s.Close()
	o, ok, err := s.Checkpoint(crashTPs[0])
	if err != nil {
		t.Fatal(err)
	}
	m := int(o.Source)
	if !ok {
		m = 0
	}
	if !noSync && m < before {
		t.Fatalf("after crash: batches 1..%d, but %d were committed before it (unsynced %d%%)", m, before, unsynced)
	}
	for _, tp := range crashTPs {
		o, ok, err := s.Checkpoint(tp)
		if err != nil || ok != (m > 0) || (ok && (o.Source != int64(m) || o.Changelog != int64(m) || o.Finished != nil)) {
			t.Fatalf("after crash: %s offsets %+v %v %v, want batch %d", tp, o, ok, err, m)
		}
		v, ok, err := s.Get(tp, []byte("last"))
		if err != nil || ok != (m > 0) || (ok && string(v) != fmt.Sprint(m)) {
			t.Fatalf("after crash: %s state %q %v %v, want batch %d", tp, v, ok, err, m)
		}
		for n := 1; n <= total; n++ {
			ids := make([]string, crashBatchIDs(idSeed, n))
			for j := range ids {
				ids[j] = crashID(n, j)
			}
			found, err := s.HasMany(tp, ids)
			if err != nil {
				t.Fatal(err)
			}
			for j, f := range found {
				if f != (n <= m) {
					t.Fatalf("after crash at batch %d: %s ID %s present=%v (unsynced %d%%): torn batch", m, tp, ids[j], f, unsynced)
				}
			}
		}
	}
}

func commitCrashBatch(s *Store, idSeed uint64, n int) error {
	b := s.NewBatch()
	defer b.Close()
	at := time.Unix(1_700_000_000+int64(n), 0)
	for _, tp := range crashTPs {
		for j := 0; j < crashBatchIDs(idSeed, n); j++ {
			if err := b.MarkProcessed(tp, crashID(n, j), at); err != nil {
				return err
			}
		}
		if err := b.Set(tp, []byte("last"), []byte(fmt.Sprint(n))); err != nil {
			return err
		}
		if err := b.SetOffsets(tp, Offsets{Source: int64(n), Changelog: int64(n)}); err != nil {
			return err
		}
	}
	return b.Commit()
}

// TestCrashApply restores a partition from changelog entries in chunks and
// crashes in the middle: the recorded changelog offset always matches the
// entries in the store, and a second restore from that offset completes it.
func TestCrashApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 0))
	for round := 0; round < *roundsFlag; round++ {
		fs := vfs.NewCrashableMem()
		opts := []Opt{ClusterID("c1"), Group("g1"), MemTableSize(1 << 20), Logger(testLogger(t))}
		s, err := Open("/s", append(opts, FS(fs))...)
		if err != nil {
			t.Fatal(err)
		}
		tp := TP{"orders", 3}
		entries := make([]Entry, 2000+rng.IntN(3000))
		for i := range entries {
			entries[i] = Entry{Offset: int64(i), Kind: KindMark, ID: fmt.Sprintf("id-%d", i), At: time.UnixMilli(int64(i))}
		}
		chunk := 100 + rng.IntN(900)
		crashAt := rng.IntN(len(entries)/chunk + 1)
		cloneRNG := rand.New(rand.NewPCG(rng.Uint64(), 0))
		var clone *vfs.MemFS
		for i, c := 0, 0; i < len(entries); i, c = i+chunk, c+1 {
			if c == crashAt {
				clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: cloneRNG})
			}
			end := min(i+chunk, len(entries))
			if err := s.Apply(tp, entries[i:end], int64(end)); err != nil {
				t.Fatal(err)
			}
		}
		if clone == nil {
			clone = fs.CrashClone(vfs.CrashCloneCfg{})
		}
		s.Close()

		s, err = Open("/s", append(opts, FS(clone))...)
		if err != nil {
			t.Fatal(err)
		}
		o, ok, err := s.Checkpoint(tp)
		if err != nil {
			t.Fatal(err)
		}
		next := 0
		if ok {
			next = int(o.Changelog)
		}
		if next != min(crashAt*chunk, len(entries)) {
			t.Fatalf("after crash: changelog offset %d, want %d", next, crashAt*chunk)
		}
		ids := make([]string, len(entries))
		for i := range ids {
			ids[i] = entries[i].ID
		}
		found, err := s.HasMany(tp, ids)
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range found {
			if f != (i < next) {
				t.Fatalf("after crash at changelog offset %d: entry %d present=%v", next, i, f)
			}
		}
		// Restoring everything again applies only what is missing.
		if err := s.Apply(tp, entries, int64(len(entries))); err != nil {
			t.Fatal(err)
		}
		if found, _ := s.HasMany(tp, ids); !allTrue(found) {
			t.Fatal("a second restore left IDs out")
		}
		s.Close()
	}
}

func allTrue(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}
