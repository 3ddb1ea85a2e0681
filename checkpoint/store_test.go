package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/onceq/onceq"
)

func testOptions(t testing.TB, fs vfs.FS) []Opt {
	return []Opt{ClusterID("c1"), Group("g1"), FS(fs), Logger(testLogger(t))}
}

func mustOpen(t testing.TB, dir string, opts ...Opt) *Store {
	t.Helper()
	s, err := Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// writeRaw writes a key straight into the Pebble store in dir.
func writeRaw(t *testing.T, fs vfs.FS, dir string, key, value []byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: pebbleLogger{testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(key, value, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, fs vfs.FS)
		opts    []Opt // after testOptions
		kind    error
		msg     string
	}{
		{
			name: "other group",
			opts: []Opt{Group("g2")},
			kind: ErrMismatch,
			msg:  `checkpoint: dir /s belongs to group "g1" of cluster "c1", not group "g2" of cluster "c1": use another --checkpoint-dir or the right --group`,
		},
		{
			name: "other cluster",
			opts: []Opt{ClusterID("c2")},
			kind: ErrMismatch,
			msg:  `not group "g1" of cluster "c2"`,
		},
		{
			name:    "garbage meta",
			prepare: func(t *testing.T, fs vfs.FS) { writeRaw(t, fs, "/s", metaKey(), []byte{1, 0xff}) },
			kind:    ErrCorrupt,
			msg:     "checkpoint: dir /s: meta value: bad cluster ID: the directory is damaged or not an onceq checkpoint store: move it away",
		},
		{
			name:    "newer format",
			prepare: func(t *testing.T, fs vfs.FS) { writeRaw(t, fs, "/s", metaKey(), encodeMeta(meta{Format: 9})) },
			kind:    ErrVersion,
			msg:     "checkpoint: dir /s has checkpoint format version 9; this onceq reads version 1",
		},
		{
			name: "pebble store of something else",
			prepare: func(t *testing.T, fs vfs.FS) {
				writeRaw(t, fs, "/other", []byte("hello"), []byte("world"))
			},
			kind: ErrCorrupt,
			msg:  "checkpoint: dir /other holds a Pebble store without onceq meta: move it away",
		},
		{
			name: "directory with other files",
			prepare: func(t *testing.T, fs vfs.FS) {
				f, err := fs.Create("/other/notes.txt", vfs.WriteCategoryUnspecified)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
			},
			kind: ErrCorrupt,
			msg:  "checkpoint: dir /other is not empty (notes.txt) and holds no checkpoint store: use an empty or new directory",
		},
		{
			name: "read-only without a store",
			opts: []Opt{ReadOnly()},
			kind: ErrNotFound,
			msg:  "checkpoint: dir /other does not exist",
		},
		{
			name: "no group",
			opts: []Opt{Group("")},
			kind: ErrInvalid,
			msg:  "checkpoint: Group: none: pass checkpoint.Group",
		},
		{
			name: "cache all memtables",
			opts: []Opt{CacheSize(64 << 20)},
			kind: ErrInvalid,
			msg:  "checkpoint: CacheSize 67108864: memtables of 33554432 bytes (MemTableSize) take it all: want at least 3 memtables",
		},
		{
			name: "tiny window",
			opts: []Opt{DedupWindow(time.Millisecond)},
			kind: ErrInvalid,
			msg:  "checkpoint: DedupWindow 1ms: want 1s or more",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			mustOpen(t, "/s", testOptions(t, fs)...).Close()
			if tc.prepare != nil {
				if err := fs.MkdirAll("/other", 0o755); err != nil && tc.name == "directory with other files" {
					t.Fatal(err)
				}
				tc.prepare(t, fs)
			}
			dir := "/s"
			if strings.Contains(tc.msg, "/other") {
				dir = "/other"
			}
			s, err := Open(dir, append(testOptions(t, fs), tc.opts...)...)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %v is not %v", err, tc.kind)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}

// TestOpenReportsEveryBadOption: Open refuses all the options that are
// wrong in one error, each an *onceq.OptionError matching ErrInvalid, and
// creates nothing before it has checked them.
func TestOpenReportsEveryBadOption(t *testing.T) {
	fs := vfs.NewMem()
	_, err := Open("/s", FS(fs), Group(strings.Repeat("g", maxNameLen+1)), DedupWindow(time.Millisecond),
		CacheSize(1000), MemTableSize(2<<30), nil)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open: %v, want ErrInvalid", err)
	}
	var got []string
	for _, oe := range onceq.Options(err) {
		got = append(got, oe.Option)
		if oe.Pkg != "checkpoint" || !errors.Is(oe, ErrInvalid) {
			t.Errorf("%v: package %q, errors.Is(ErrInvalid) %v; want checkpoint, true", oe, oe.Pkg, errors.Is(oe, ErrInvalid))
		}
	}
	want := []string{"ClusterID", "Group", "DedupWindow", "CacheSize", "MemTableSize"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("refused options %v, want %v in\n%v", got, want, err)
	}
	for _, msg := range []string{
		"checkpoint: ClusterID: none: pass checkpoint.ClusterID",
		"checkpoint: Group \"gggg",
		"longer than 255 bytes",
		"checkpoint: CacheSize 1000: want at least 1 MiB",
		"checkpoint: MemTableSize 2147483648: want 1 MiB to 1 GiB",
		"checkpoint: a nil option",
	} {
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("error %q does not contain %q", err, msg)
		}
	}
	if names, err := fs.List("/"); err != nil || len(names) != 0 {
		t.Errorf("after the refused Open the filesystem holds %v (%v); want nothing", names, err)
	}

	// Read-only, the cluster ID and group may be left out, but one given
	// is still checked; later options replace earlier ones.
	_, err = Open("/s", FS(fs), ReadOnly(), Group("g"), Group("\xff"), CacheSize(64<<20))
	got = got[:0]
	for _, oe := range onceq.Options(err) {
		got = append(got, oe.Describe(oe.Option))
	}
	want = []string{`Group "\xff": not UTF-8`, "CacheSize 67108864: memtables of 33554432 bytes (MemTableSize) take it all: want at least 3 memtables, 100663296, or smaller memtables"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("read-only: refused %q, want %q", got, want)
	}
}

func TestOpenTwiceInProcess(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "/s", testOptions(t, fs)...)
	_, err := Open("/s", testOptions(t, fs)...)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second Open: %v, want ErrInUse", err)
	}
	s.Close()
	mustOpen(t, "/s", testOptions(t, fs)...)
}

const helperEnv = "ONCEQ_CHECKPOINT_HELPER_DIR"

// TestHelperProcess is not a test: TestOpenInUseByOtherProcess runs the test
// binary again with it, to hold a store open in another process until its
// standard input closes.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("helper process for TestOpenInUseByOtherProcess")
	}
	s, err := Open(dir, ClusterID("c1"), Group("g1"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	s.Close()
	os.Exit(0)
}

func TestOpenInUseByOtherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper process: %v", err)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("helper process said %q, %v", line, err)
	}
	_, err = Open(dir, ClusterID("c1"), Group("g1"))
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("Open: %v, want ErrInUse", err)
	}
	want := fmt.Sprintf("checkpoint: dir %s is in use by another process (pid %d): stop it, or use another --checkpoint-dir", dir, cmd.Process.Pid)
	if err.Error() != want {
		t.Errorf("error:\n%s\nwant:\n%s", err, want)
	}
	// Read-only opens take the lock too.
	if _, err := Open(dir, ReadOnly()); !errors.Is(err, ErrInUse) {
		t.Errorf("read-only Open: %v, want ErrInUse", err)
	}
}

func TestReadOnly(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, "/s", testOptions(t, fs)...)
	tp := TP{"t", 0}
	b := s.NewBatch()
	if err := b.SetOffsets(tp, Offsets{Source: 5, Changelog: 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ro := mustOpen(t, "/s", FS(fs), ReadOnly(), Logger(testLogger(t)))
	if c, g := ro.Identity(); c != "c1" || g != "g1" {
		t.Errorf("Identity() = %q, %q", c, g)
	}
	if o, ok, err := ro.Checkpoint(tp); err != nil || !ok || o.Source != 5 {
		t.Errorf("Checkpoint = %v, %v, %v", o, ok, err)
	}
	b = ro.NewBatch()
	_ = b.SetOffsets(tp, Offsets{})
	if err := b.Commit(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Commit on a read-only store: %v", err)
	}
	if err := ro.DropPartition(tp); !errors.Is(err, ErrInvalid) {
		t.Errorf("DropPartition on a read-only store: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s := mustOpen(t, "/s", testOptions(t, vfs.NewMem())...)
	tp := TP{"t", 0}
	b := s.NewBatch()
	_ = b.MarkProcessed(tp, "a", time.Now())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for name, err := range map[string]error{
		"Commit": b.Commit(),
		"Has":    second(s.Has(tp, "a")),
		"Get":    third(s.Get(tp, []byte("k"))),
		"Expire": second(s.ExpireProcessed(context.Background(), time.Now(), 0)),
		"Drop":   s.DropPartition(tp),
		"Apply":  s.Apply(tp, nil, 1),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func second[A any](_ A, err error) error        { return err }
func third[A, B any](_ A, _ B, err error) error { return err }

func TestInvalidArguments(t *testing.T) {
	s := mustOpen(t, "/s", testOptions(t, vfs.NewMem())...)
	tp := TP{"t", 0}
	b := s.NewBatch()
	defer b.Close()
	long := strings.Repeat("x", MaxIDLen+1)
	for name, err := range map[string]error{
		"empty ID":      b.MarkProcessed(tp, "", time.Now()),
		"long ID":       b.MarkProcessed(tp, long, time.Now()),
		"empty topic":   b.MarkProcessed(TP{"", 0}, "a", time.Now()),
		"negative part": b.MarkProcessed(TP{"t", -1}, "a", time.Now()),
		"empty key":     b.Set(tp, nil, []byte("v")),
		"long key":      b.Delete(tp, make([]byte, MaxKeyLen+1)),
		"long value":    b.Set(tp, []byte("k"), make([]byte, MaxValueLen+1)),
		"bad offsets":   b.SetOffsets(tp, Offsets{Source: -2}),
		"Has":           second(s.Has(tp, "")),
		"HasMany":       second(s.HasMany(tp, []string{"a", ""})),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if !b.Empty() {
		t.Error("refused operations were added to the batch")
	}
}

// TestHasMany compares Has and HasMany with a map over random IDs, across a
// flush so that lookups hit both the memtable and sstables.
func TestHasMany(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	s := mustOpen(t, "/s", testOptions(t, vfs.NewMem())...)
	tps := []TP{{"a", 0}, {"a", 1}, {"b", 0}}
	want := map[TP]map[string]bool{}
	for round := 0; round < 4; round++ {
		b := s.NewBatch()
		for i := 0; i < 500; i++ {
			tp, id := tps[rng.IntN(len(tps))], strconv.Itoa(rng.IntN(3000))
			if want[tp] == nil {
				want[tp] = map[string]bool{}
			}
			want[tp][id] = true
			if err := b.MarkProcessed(tp, id, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tp := range append(tps, TP{"c", 0}) {
		ids := make([]string, 400)
		for i := range ids {
			ids[i] = strconv.Itoa(rng.IntN(3200))
		}
		got, err := s.HasMany(tp, ids)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			one, err := s.Has(tp, id)
			if err != nil {
				t.Fatal(err)
			}
			if got[i] != want[tp][id] || one != want[tp][id] {
				t.Fatalf("%s %s: HasMany %v, Has %v, want %v", tp, id, got[i], one, want[tp][id])
			}
		}
	}
}

// TestConcurrentUse runs commits, lookups, expiry and drops at once, for the
// race detector, then checks that no ID marked within the window was lost.
func TestConcurrentUse(t *testing.T) {
	s := mustOpen(t, "/s", ClusterID("c1"), Group("g1"), FS(vfs.NewMem()), DedupWindow(time.Hour), NoSync())
	base := time.Unix(1_700_000_000, 0)
	old, fresh := base.Add(-2*time.Hour), base
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const writers, batches = 3, 40
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tp := TP{"t", int32(w)}
			for i := 0; i < batches; i++ {
				b := s.NewBatch()
				for j := 0; j < 50; j++ {
					_ = b.MarkProcessed(tp, fmt.Sprintf("old-%d-%d", i, j), old)
					_ = b.MarkProcessed(tp, fmt.Sprintf("new-%d-%d", i, j), fresh)
				}
				_ = b.SetOffsets(tp, Offsets{Source: int64(i), Changelog: int64(i)})
				if err := b.Commit(); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.HasMany(tp, []string{"old-0-0", "new-0-0", "x"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if _, err := s.ExpireProcessed(ctx, base, 100); err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
			_ = s.DropPartition(TP{"gone", 0})
		}
	}()
	for w := 0; w < writers; w++ {
		b := s.NewBatch()
		_ = b.MarkProcessed(TP{"gone", 0}, "x", fresh)
		_ = b.Commit()
	}
	for done := false; !done; {
		o, ok, _ := s.Checkpoint(TP{"t", writers - 1})
		done = ok && o.Source == batches-1
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	cancel()
	wg.Wait()
	if _, err := s.ExpireProcessed(context.Background(), base, 0); err != nil {
		t.Fatal(err)
	}
	for w := 0; w < writers; w++ {
		tp := TP{"t", int32(w)}
		for i := 0; i < batches; i++ {
			ids := []string{fmt.Sprintf("old-%d-7", i), fmt.Sprintf("new-%d-7", i)}
			got, err := s.HasMany(tp, ids)
			if err != nil {
				t.Fatal(err)
			}
			if got[0] || !got[1] {
				t.Fatalf("%s batch %d: old present %v, new present %v", tp, i, got[0], got[1])
			}
		}
	}
}

// TestDropPartitionFailsOpenBatch pins that a batch built before its
// partition was dropped does not resurrect it.
func TestDropPartitionFailsOpenBatch(t *testing.T) {
	s := mustOpen(t, "/s", testOptions(t, vfs.NewMem())...)
	tp := TP{"t", 0}
	b := s.NewBatch()
	_ = b.MarkProcessed(tp, "a", time.Now())
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b = s.NewBatch()
	_ = b.MarkProcessed(tp, "b", time.Now())
	if err := s.DropPartition(tp); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "dropped") {
		t.Fatalf("Commit after drop: %v", err)
	}
	if tps, _ := s.Partitions(); len(tps) != 0 {
		t.Errorf("Partitions() = %v after drop", tps)
	}
}

func TestStoreOnDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cp")
	s := mustOpen(t, dir, ClusterID("c1"), Group("g1"))
	b := s.NewBatch()
	_ = b.MarkProcessed(TP{"t", 0}, "a", time.Now())
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = mustOpen(t, dir, ClusterID("c1"), Group("g1"))
	if ok, err := s.Has(TP{"t", 0}, "a"); !ok || err != nil {
		t.Fatalf("Has after reopen: %v, %v", ok, err)
	}
}

func TestStats(t *testing.T) {
	s := mustOpen(t, "/s", testOptions(t, vfs.NewMem())...)
	b := s.NewBatch()
	for i := 0; i < 10; i++ {
		_ = b.MarkProcessed(TP{"a", 0}, strconv.Itoa(i), time.Now())
	}
	_ = b.Set(TP{"a", 0}, []byte("k"), []byte("v"))
	_ = b.Set(TP{"b", 3}, []byte("k"), []byte("v"))
	_ = b.SetOffsets(TP{"a", 0}, Offsets{Source: 4, Changelog: 9})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.FormatVersion != 1 || st.ClusterID != "c1" || st.Group != "g1" || st.DiskBytes == 0 || len(st.Partitions) != 2 {
		t.Fatalf("Stats() = %+v", st)
	}
	a, bs := st.Partitions[0], st.Partitions[1]
	if a.Topic != "a" || a.IDs != 10 || a.StateKeys != 1 || a.ExpiryRecs != 1 || a.Offsets == nil || a.Offsets.Source != 4 || a.Offsets.Changelog != 9 || a.Offsets.Finished != nil {
		t.Errorf("a/0: %+v", a)
	}
	if bs.Topic != "b" || bs.Partition != 3 || bs.IDs != 0 || bs.StateKeys != 1 || bs.Offsets != nil {
		t.Errorf("b/3: %+v", bs)
	}
}
