package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/onceq/onceq/internal/testutil"
)

// The benchmarks of the targets. The large ones share one store of
// ONCEQ_BENCH_IDS processed IDs (default 10 million), built once per test
// binary on first use (or kept in ONCEQ_BENCH_DIR and reused by later runs),
// with the default block cache (or ONCEQ_BENCH_CACHE_MB);
// benchmarks only run under -bench, so `go test` stays fast. Run them with:
//
//	go test ./checkpoint -run '^$' -bench . -benchtime 3s -count 3
//
// Figures to watch (the targets): BenchmarkCommit p99-µs <= 1000;
// BenchmarkHas lookups/s >= 1e6; BenchmarkBytesPerID bytes/ID <= 64;
// BenchmarkRestore s/op <= 2; BenchmarkCommitDuringExpiry p99-µs <= 5000.

// benchIDs is how many IDs the shared store holds.
func benchIDs(b *testing.B) int {
	n := 10_000_000
	if v := os.Getenv("ONCEQ_BENCH_IDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("ONCEQ_BENCH_IDS=%q: want a number >= 1000", v)
		}
	}
	return n
}

var benchTP = TP{"orders", 0}

// benchEpoch is when the first benchmark ID was made; ID i was made i
// milliseconds later, so 10 million IDs span under 3 hours, processed 1,000
// per commit.
var benchEpoch = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// uuid7 returns a UUIDv7-like ID: a 48-bit millisecond timestamp, then 74
// random bits (drawn from seed), in the 36-character text form.
func uuid7(ms uint64, seed uint64) string {
	var u [16]byte
	r := rand.New(rand.NewPCG(seed, 0x6f6e636571))
	hi, lo := r.Uint64(), r.Uint64()
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70 | byte(hi>>8)&0x0f
	u[7] = byte(hi)
	u[8] = 0x80 | byte(lo>>56)&0x3f
	for i := 9; i < 16; i++ {
		u[i] = byte(lo >> (8 * (15 - i)))
	}
	return uuid.UUID(u).String()
}

// benchID returns the i-th ID of the shared store; benchMiss returns an ID
// of the same time that is not in it.
func benchID(i int) string   { return uuid7(millis(benchEpoch)+uint64(i), uint64(i)) }
func benchMiss(i int) string { return uuid7(millis(benchEpoch)+uint64(i), uint64(i)^1<<62) }

// fill marks IDs [from, to) as a worker does, in batches of 1,000 (one
// commit each, all marked at the time of the batch's last ID, in mark
// records), and flushes.
func fill(b testing.TB, s *Store, from, to int, id func(int) string, at func(int) time.Time) {
	marks := make([]Mark, 0, 1000)
	for i := from; i < to; {
		batch := s.NewBatch()
		end := min(i+1000, to)
		t := at(end - 1)
		for marks = marks[:0]; i < end; i++ {
			marks = append(marks, Mark{ID: id(i), At: t})
		}
		for _, e := range MarkRecords(marks) {
			if err := batch.MarkRecord(benchTP, e.Marks); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
}

var shared struct {
	once sync.Once
	s    *Store
	dir  string
	temp bool // remove dir at the end
	n    int
	err  error
}

// sharedStore returns the shared store of benchIDs IDs, opening it on first
// use and building it first if needed: unsynced batches of 1,000 IDs, then a
// full compaction. It stays open until the test binary exits.
func sharedStore(b *testing.B) (*Store, int) {
	shared.once.Do(func() {
		shared.n = benchIDs(b)
		shared.dir = os.Getenv("ONCEQ_BENCH_DIR")
		if shared.dir == "" {
			shared.dir, shared.err = os.MkdirTemp("", "onceq-checkpoint-bench-")
			shared.temp = true
		}
		if shared.err != nil {
			return
		}
		opts := []Opt{ClusterID("bench"), Group("bench")}
		if v := os.Getenv("ONCEQ_BENCH_CACHE_MB"); v != "" {
			mb, err := strconv.Atoi(v)
			if err != nil {
				b.Fatalf("ONCEQ_BENCH_CACHE_MB=%q: %v", v, err)
			}
			opts = append(opts, CacheSize(int64(mb)<<20))
		}
		names, _ := os.ReadDir(shared.dir)
		if shared.s, shared.err = Open(shared.dir, opts...); shared.err != nil || len(names) > 0 {
			return // reused: built by an earlier run with the same ONCEQ_BENCH_IDS
		}
		start := time.Now()
		fill(b, shared.s, 0, shared.n, benchID, func(i int) time.Time { return benchEpoch.Add(time.Duration(i) * time.Millisecond) })
		shared.err = compactAll(shared.s)
		b.Logf("built a store of %d IDs in %v", shared.n, time.Since(start).Round(time.Millisecond))
		b.Logf("LSM:\n%s", shared.s.db.Metrics())
	})
	if shared.err != nil {
		b.Fatal(shared.err)
	}
	return shared.s, shared.n
}

func compactAll(s *Store) error {
	lower, _ := handleBounds(0)
	_, upper := handleBounds(^handle(0))
	return s.db.Compact(context.Background(), lower, upper, true)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		shared.s.Close()
	}
	if shared.temp {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// latencies collects durations and reports percentiles.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	slices.Sort(l.d)
	if len(l.d) == 0 {
		return
	}
	at := func(p float64) float64 {
		return float64(l.d[min(len(l.d)-1, int(p*float64(len(l.d))))].Microseconds())
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(float64(l.d[len(l.d)-1].Microseconds()), "max-µs")
}

// BenchmarkCommit measures a synced commit of offsets plus 1,000 IDs (the
// time of building the batch and committing it): back to back, the disk's
// throughput limit, and one commit every 10 ms, ten times the worker's
// default commit rate (100,000 IDs/s).
func BenchmarkCommit(b *testing.B) {
	for _, every := range []time.Duration{0, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("every=%v", every), func(b *testing.B) {
			s, err := Open(b.TempDir(), ClusterID("bench"), Group("bench"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var lat latencies
			c := newCommitter(every)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				lat.add(c.commit(b, s, benchID))
			}
			lat.report(b)
		})
	}
}

// A committer commits batches of 1,000 IDs and offsets, one every interval
// (0: back to back).
type committer struct {
	every time.Duration
	next  time.Time
	n     int
	ids   []string
}

func newCommitter(every time.Duration) *committer {
	return &committer{every: every, next: time.Now(), ids: make([]string, 1000)}
}

// commit makes the next batch of IDs with id, waits for its turn, and
// returns how long building and committing the batch took.
func (c *committer) commit(b *testing.B, s *Store, id func(int) string) time.Duration {
	b.StopTimer()
	for j := range c.ids {
		c.ids[j] = id(c.n*1000 + j)
	}
	c.next = c.next.Add(c.every)
	time.Sleep(time.Until(c.next))
	b.StartTimer()
	start := time.Now()
	batch := s.NewBatch()
	for _, id := range c.ids {
		if err := batch.MarkProcessed(benchTP, id, start); err != nil {
			b.Fatal(err)
		}
	}
	if err := batch.SetOffsets(benchTP, Offsets{Source: int64(c.n), Changelog: int64(c.n)}); err != nil {
		b.Fatal(err)
	}
	if err := batch.Commit(); err != nil {
		b.Fatal(err)
	}
	c.n++
	return time.Since(start)
}

// BenchmarkHas looks up IDs in the shared store. The workloads:
//
//   - new: IDs of tasks not seen yet, the common case (the bloom filters
//     answer);
//   - recent: half new IDs, half duplicates of the last 1% of IDs processed
//     (redeliveries and producer retries are recent);
//   - uniform: half IDs absent from the store but of the same times as
//     stored ones, half stored IDs drawn uniformly from all of them: the
//     worst case, most reads miss the block cache.
//
// Each runs as single lookups (Has), from all cores (Parallel), and 1,000
// at a time, as the worker looks up one fetch (HasMany).
func BenchmarkHas(b *testing.B) {
	s, n := sharedStore(b)
	const k = 1 << 16
	for _, w := range []struct {
		name string
		id   func(r *rand.Rand, i int) (string, bool)
	}{
		{"new", func(r *rand.Rand, i int) (string, bool) { return benchID(n + r.IntN(n)), false }},
		{"recent", func(r *rand.Rand, i int) (string, bool) {
			if i%2 == 0 {
				return benchID(n - 1 - r.IntN(n/100)), true
			}
			return benchID(n + r.IntN(n)), false
		}},
		{"uniform", func(r *rand.Rand, i int) (string, bool) {
			if i%2 == 0 {
				return benchID(r.IntN(n)), true
			}
			return benchMiss(r.IntN(n)), false
		}},
	} {
		r := rand.New(rand.NewPCG(1, 2))
		ids, want := make([]string, k), make([]bool, k)
		for i := range ids {
			ids[i], want[i] = w.id(r, i)
		}
		report := func(b *testing.B, lookups int) {
			b.ReportMetric(float64(lookups)/b.Elapsed().Seconds(), "lookups/s")
		}
		b.Run(w.name+"/Has", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				j := i % k
				if ok, err := s.Has(benchTP, ids[j]); err != nil || ok != want[j] {
					b.Fatalf("Has(%s) = %v, %v; want %v", ids[j], ok, err, want[j])
				}
			}
			report(b, b.N)
		})
		b.Run(w.name+"/HasParallel", func(b *testing.B) {
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					j := int(next.Add(1)) % k
					if ok, err := s.Has(benchTP, ids[j]); err != nil || ok != want[j] {
						b.Errorf("Has(%s) = %v, %v; want %v", ids[j], ok, err, want[j])
						return
					}
				}
			})
			report(b, b.N)
		})
		b.Run(w.name+"/HasMany1000", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				j := i * 1000 % (k - 1000)
				found, err := s.HasMany(benchTP, ids[j:j+1000])
				if err != nil || !slices.Equal(found, want[j:j+1000]) {
					b.Fatalf("HasMany: %v, or wrong answers", err)
				}
			}
			report(b, b.N*1000)
		})
	}
}

// BenchmarkBytesPerID reports the shared store's size on disk per ID after
// a full compaction: bytes/ID counts every file of the directory (once the
// compaction's inputs are deleted), sst-bytes/ID the sstables alone (the
// rest are WAL files kept for reuse, a fixed 100 MiB or so), and the two
// families' shares of it.
func BenchmarkBytesPerID(b *testing.B) {
	s, n := sharedStore(b)
	if err := compactAll(s); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	// Obsolete files are deleted in the background: wait until the size
	// holds still.
	size := testutil.DirSize(b, s.Dir())
	for i := 0; i < 100; i++ {
		time.Sleep(100 * time.Millisecond)
		if next := testutil.DirSize(b, s.Dir()); next != size {
			size, i = next, 0
		} else if i >= 5 {
			break
		}
	}
	var ssts int64
	for _, l := range s.db.Metrics().Levels {
		ssts += l.TablesSize
	}
	idLower, idUpper := familyBounds(s.lookup(benchTP).h, familyID)
	ids, _ := s.db.EstimateDiskUsage(idLower, idUpper)
	xLower, xUpper := familyBounds(s.lookup(benchTP).h, familyExpiry)
	records, _ := s.db.EstimateDiskUsage(xLower, xUpper)
	b.ReportMetric(float64(size)/float64(n), "bytes/ID")
	b.ReportMetric(float64(ssts)/float64(n), "sst-bytes/ID")
	b.ReportMetric(float64(ids)/float64(n), "idkeys-bytes/ID")
	b.ReportMetric(float64(records)/float64(n), "records-bytes/ID")
}

// BenchmarkRestore restores 1,000,000 IDs into a new store from changelog
// records: decoding, and Apply in chunks of 10,000 entries, each synced.
func BenchmarkRestore(b *testing.B) {
	const total, chunk = 1_000_000, 10_000
	keys, values := make([][]byte, total), make([][]byte, total)
	for i := range keys {
		keys[i], values[i] = EncodeMark(benchID(i), benchEpoch.Add(time.Duration(i)*time.Millisecond))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := Open(filepath.Join(b.TempDir(), strconv.Itoa(i)), ClusterID("bench"), Group("bench"))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		entries := make([]Entry, chunk)
		for off := 0; off < total; off += chunk {
			for j := range entries {
				if entries[j], err = DecodeChangelog(keys[off+j], values[off+j]); err != nil {
					b.Fatal(err)
				}
				entries[j].Offset = int64(off + j)
			}
			if err := s.Apply(benchTP, entries, int64(off+chunk)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if ok, _ := s.Has(benchTP, benchID(total-1)); !ok {
			b.Fatal("last ID missing after restore")
		}
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/op")
	b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "ids/s")
}

// BenchmarkCommitDuringExpiry measures synced commits of 1,000 IDs while
// Expire removes 1,000,000 expired IDs, with commits back to back
// and every 10 ms.
func BenchmarkCommitDuringExpiry(b *testing.B) {
	for _, every := range []time.Duration{0, 10 * time.Millisecond} {
		b.Run(fmt.Sprintf("every=%v", every), func(b *testing.B) {
			benchCommitDuringExpiry(b, every)
		})
	}
}

func benchCommitDuringExpiry(b *testing.B, every time.Duration) {
	const expired = 1_000_000
	window := 24 * time.Hour
	var lat latencies
	var expiry time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), strconv.Itoa(i))
		s, err := Open(dir, ClusterID("bench"), Group("bench"), NoSync(), DedupWindow(window))
		if err != nil {
			b.Fatal(err)
		}
		fill(b, s, 0, expired, benchID, func(int) time.Time { return benchEpoch })
		s.Close()
		if s, err = Open(dir, ClusterID("bench"), Group("bench"), DedupWindow(window)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		now := benchEpoch.Add(window + time.Hour)
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			n, err := s.Expire(context.Background(), now, 0, func([]Removed) {})
			if err == nil && n != expired {
				err = fmt.Errorf("removed %d IDs, want %d", n, expired)
			}
			expiry += time.Since(start)
			done <- err
		}()
		c := newCommitter(every)
		for running := true; running; {
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
				running = false
			default:
				lat.add(c.commit(b, s, benchMiss))
			}
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
	lat.report(b)
	b.ReportMetric(expiry.Seconds()/float64(b.N), "expiry-s")
	b.ReportMetric(float64(len(lat.d))/float64(b.N), "commits")
}

// BenchmarkExpireNothingDue measures a call of Expire on a store of
// 1,000,000 IDs none of which is due, as a worker makes every minute, once
// the calls after the store opened have scanned it through.
func BenchmarkExpireNothingDue(b *testing.B) {
	s, err := Open(b.TempDir(), ClusterID("bench"), Group("bench"), NoSync(), DedupWindow(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fill(b, s, 0, 1_000_000, benchID, func(i int) time.Time { return benchEpoch.Add(time.Duration(i) * time.Microsecond) })
	now := benchEpoch.Add(time.Minute)
	expire := func() {
		now = now.Add(time.Minute)
		if n, err := s.Expire(context.Background(), now, 10_000, func([]Removed) {}); err != nil || n != 0 {
			b.Fatalf("Expire deleted %d IDs (%v), want none", n, err)
		}
	}
	for range 10 {
		expire()
	}
	s.expireMu.Lock()
	before := s.expireScanned
	s.expireMu.Unlock()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		expire()
	}
	b.StopTimer()
	s.expireMu.Lock()
	b.ReportMetric(float64(s.expireScanned-before)/float64(b.N), "keys/op")
	s.expireMu.Unlock()
}
