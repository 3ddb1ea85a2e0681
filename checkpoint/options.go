package checkpoint

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/onceq/onceq"
)

// Defaults of Options.
const (
	DefaultDedupWindow = 7 * 24 * time.Hour
	DefaultCacheSize   = 96 << 20 // 96 MiB
	// DefaultMemTableSize is 32 MiB: a worker's marks are random keys across
	// the partitions, so every flush overlaps the base level and its
	// compaction rewrites that level. Memtables of 32 MiB rather than 16 flush
	// half as often and cut that work: the exactly-once drain of
	// BenchmarkWorkerThroughput with ONCEQ_BENCH_TASKS=3000000 ran 1.3 times
	// as fast, with the same cache size.
	DefaultMemTableSize = 32 << 20

	// memTableStopWrites is how many memtables may queue for flushing before
	// writes stall. Pebble keeps one more than this of old WAL files to
	// reuse, each as large as a memtable: a fixed 100 MiB or so on disk.
	memTableStopWrites = 2
)

// Limits on what the store accepts. The changelog encodes each item as one
// Kafka record, so the limits keep records well below the broker's default
// 1 MiB message size.
const (
	MaxIDLen       = onceq.MaxIDLen // bytes of a task ID
	MaxKeyLen      = 4 << 10        // bytes of a state key
	MaxValueLen    = 512 << 10      // bytes of a state value
	maxNameLen     = 255            // bytes of a cluster ID or group
	maxTopicLen    = 249            // Kafka's limit
	formatVersion  = 1              // the key layout in keys.go
	defaultLogName = "checkpoint"
)

// Options configures a Store. The zero value of every field but ClusterID
// and Group is a working default.
type Options struct {
	// ClusterID is the ID of the Kafka cluster whose partitions the store
	// checkpoints. Required, except with ReadOnly. The first Open records it;
	// later Opens with another cluster ID fail with ErrMismatch, so a store
	// is never reused against a different cluster.
	ClusterID string

	// Group is the consumer group the store belongs to. Required, except with
	// ReadOnly; recorded and checked like ClusterID.
	Group string

	// DedupWindow is how long a processed ID is remembered: ExpireProcessed
	// removes IDs processed longer ago. Default 7 days.
	DedupWindow time.Duration

	// NoSync makes Batch.Commit and Apply return before their writes are
	// synced to disk. A crash may then lose the latest commits (never part
	// of one). Default false: every commit is synced; onceq's exactly-once
	// guarantee needs that unless the changelog is replayed on every start.
	NoSync bool

	// CacheSize bounds the store's memory in bytes: Pebble takes the
	// memtables out of it and caches blocks in the rest. It must be at least
	// 3 memtables: with one memtable filling and one flushing, the rest
	// keeps the filters, indexes and recent blocks that make lookups fast.
	// Default 96 MiB.
	CacheSize int64

	// MemTableSize is the size of one memtable in bytes; with the one
	// being flushed, two at most. Default 32 MiB.
	MemTableSize uint64

	// ReadOnly opens an existing store without writing to it (for
	// inspection). ClusterID and Group are then optional: when set they are
	// still checked. The directory lock is still taken: a store in use by a
	// worker cannot be opened, even read-only.
	ReadOnly bool

	// FS is the filesystem. Default vfs.Default, the operating system's.
	// Tests pass vfs.NewCrashableMem().
	FS vfs.FS

	// Logger receives the store's and Pebble's messages (Pebble's routine
	// messages at debug level). Default slog.Default().
	Logger *slog.Logger
}

// withDefaults validates o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if !o.ReadOnly || o.ClusterID != "" {
		if err := validateName("cluster ID", o.ClusterID); err != nil {
			return o, err
		}
	}
	if !o.ReadOnly || o.Group != "" {
		if err := validateName("group", o.Group); err != nil {
			return o, err
		}
	}
	switch {
	case o.DedupWindow == 0:
		o.DedupWindow = DefaultDedupWindow
	case o.DedupWindow < time.Second:
		return o, invalidf("dedup window %v: use at least 1s", o.DedupWindow)
	}
	switch {
	case o.CacheSize == 0:
		o.CacheSize = DefaultCacheSize
	case o.CacheSize < 1<<20:
		return o, invalidf("cache size %d: use at least 1 MiB", o.CacheSize)
	}
	switch {
	case o.MemTableSize == 0:
		o.MemTableSize = DefaultMemTableSize
	case o.MemTableSize < 1<<20 || o.MemTableSize > 1<<30:
		return o, invalidf("memtable size %d: use 1 MiB to 1 GiB", o.MemTableSize)
	}
	if o.CacheSize < 3*int64(o.MemTableSize) {
		return o, invalidf("cache size %d: memtables of %d bytes take it all; use a cache of at least 3 memtables", o.CacheSize, o.MemTableSize)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Logger = o.Logger.With("component", defaultLogName)
	return o, nil
}

func validateName(what, s string) error {
	switch {
	case s == "":
		return invalidf("empty %s in Options", what)
	case len(s) > maxNameLen:
		return invalidf("%s %.20q...: longer than %d bytes", what, s, maxNameLen)
	case !utf8.ValidString(s):
		return invalidf("%s %q: not UTF-8", what, s)
	}
	return nil
}

// pebbleOptions tunes Pebble for this load: small point writes synced in
// batches, point lookups of random IDs, and deletions in time order.
func (o Options) pebbleOptions(cache *pebble.Cache, lock *pebble.Lock) *pebble.Options {
	p := &pebble.Options{
		Cache:        cache,
		FS:           o.FS, // nil: Pebble wraps vfs.Default with disk-stall detection
		Lock:         lock,
		Logger:       pebbleLogger{o.Logger},
		MemTableSize: o.MemTableSize,
		ReadOnly:     o.ReadOnly,
		// Pinned rather than "newest", so a Pebble upgrade never silently
		// ratchets the on-disk format.
		FormatMajorVersion:          pebble.FormatValueSeparation,
		MemTableStopWritesThreshold: memTableStopWrites,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		LBaseMaxBytes:               64 << 20,
		// Two cores: one compaction normally, a second when L0 backs up.
		CompactionConcurrencyRange: func() (int, int) { return 1, 2 },
		MaxOpenFiles:               500,
		// Without this, a range deletion (DropPartition) may sit in the
		// memtable and keep its space until the next ordinary flush.
		FlushDelayDeleteRange: 10 * time.Second,
		WALBytesPerSync:       0, // every commit syncs anyway
	}
	for i := range p.Levels {
		// Bloom filters on every level: a lookup of an ID that is not there
		// (most lookups: new tasks) skips each sstable after one filter probe.
		p.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Fast compression in the upper levels, zstd at the bottom, where nearly
	// all IDs live.
	p.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionBalanced })
	if testTuning != nil {
		testTuning(p)
	}
	return p
}

// testTuning, set by benchmarks only, adjusts the Pebble options.
var testTuning func(*pebble.Options)

// pebbleLogger forwards Pebble's log messages to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "source", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "source", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "source", "pebble")
	panic(pebbleFatal{errors.New("checkpoint: pebble: " + msg)})
}

// pebbleFatal is the panic of Pebble's fatal errors; writes recover it into
// ErrFailed (see Store.apply).
type pebbleFatal struct{ err error }
