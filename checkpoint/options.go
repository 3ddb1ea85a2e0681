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
	"github.com/onceq/onceq/internal/compactsched"
)

// Defaults of the options.
const (
	// DefaultDedupWindow is how long a processed ID is remembered. See
	// DedupWindow.
	DefaultDedupWindow = 7 * 24 * time.Hour
	// DefaultCacheSize bounds the store's memory. See CacheSize.
	DefaultCacheSize = 96 << 20 // 96 MiB
	// DefaultMemTableSize is 32 MiB: a worker's marks are random keys across
	// the partitions, so every flush overlaps the base level and its
	// compaction rewrites that level. Memtables of 32 MiB rather than 16 flush
	// half as often and cut that work: the exactly-once drain of
	// BenchmarkWorkerThroughput with ONCEQ_BENCH_TASKS=3000000 ran 1.3 times
	// as fast, with the same cache size. See MemTableSize.
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

// An Opt configures a Store. Options are applied in order, a later one
// replacing an earlier one of the same kind; Open checks the result once
// and refuses it with every problem it finds, each an *onceq.OptionError
// that matches ErrInvalid. Only ClusterID and Group are required, and not
// with ReadOnly.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	clusterID    string
	group        string
	dedupWindow  time.Duration
	noSync       bool
	cacheSize    int64
	memTableSize uint64
	readOnly     bool
	fs           vfs.FS // nil: vfs.Default, wrapped by Pebble
	log          *slog.Logger
	errs         onceq.OptionErrors
}

func defaultConfig() config {
	return config{
		errs:         onceq.OptionErrors{Pkg: "checkpoint", Kind: ErrInvalid},
		dedupWindow:  DefaultDedupWindow,
		cacheSize:    DefaultCacheSize,
		memTableSize: DefaultMemTableSize,
		log:          slog.Default(),
	}
}

// ClusterID is the ID of the Kafka cluster whose partitions the store
// checkpoints. Required, except with ReadOnly; no default. The first Open
// records it; later Opens with another cluster ID fail with ErrMismatch,
// so a store is never reused against a different cluster. With ReadOnly,
// an empty ID is not checked.
func ClusterID(id string) Opt { return optFunc(func(c *config) { c.clusterID = id }) }

// Group is the consumer group the store belongs to. Required, except with
// ReadOnly; no default. Recorded and checked like ClusterID.
func Group(g string) Opt { return optFunc(func(c *config) { c.group = g }) }

// DedupWindow is how long a processed ID is remembered: Expire
// removes IDs processed longer ago. At least 1s. Default
// DefaultDedupWindow (7 days).
func DedupWindow(d time.Duration) Opt { return optFunc(func(c *config) { c.dedupWindow = d }) }

// NoSync makes Batch.Commit and Apply return before their writes are
// synced to disk. A crash may then lose the latest commits (never part of
// one). Default off: every commit is synced; onceq's exactly-once
// guarantee needs that unless the changelog is replayed on every start.
func NoSync() Opt { return optFunc(func(c *config) { c.noSync = true }) }

// CacheSize bounds the store's memory in bytes: Pebble takes the memtables
// out of it and caches blocks in the rest. At least 1 MiB and at least 3
// memtables (see MemTableSize): with one memtable filling and one
// flushing, the rest keeps the filters, indexes and recent blocks that
// make lookups fast. Default DefaultCacheSize (96 MiB).
func CacheSize(n int64) Opt { return optFunc(func(c *config) { c.cacheSize = n }) }

// MemTableSize is the size of one memtable in bytes, 1 MiB to 1 GiB; with
// the one being flushed, two at most. CacheSize must hold three. Default
// DefaultMemTableSize (32 MiB).
func MemTableSize(n uint64) Opt { return optFunc(func(c *config) { c.memTableSize = n }) }

// ReadOnly opens an existing store without writing to it (for
// inspection). ClusterID and Group are then optional: when given they are
// still checked. The directory lock is still taken: a store in use by a
// worker cannot be opened, even read-only. Default off: Open creates the
// store if dir holds none.
func ReadOnly() Opt { return optFunc(func(c *config) { c.readOnly = true }) }

// FS is the filesystem. Tests pass vfs.NewCrashableMem(). Default (or
// nil) vfs.Default, the operating system's, which Pebble wraps with
// disk-stall detection.
func FS(fs vfs.FS) Opt { return optFunc(func(c *config) { c.fs = fs }) }

// Logger receives the store's and Pebble's messages (Pebble's routine
// messages at debug level). Default (or nil) slog.Default() as it is when
// Open is called.
func Logger(l *slog.Logger) Opt {
	return optFunc(func(c *config) {
		if l == nil {
			l = slog.Default()
		}
		c.log = l
	})
}

// build applies opts over the defaults and checks the result, reporting
// every problem at once.
func build(opts []Opt) (config, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o == nil {
			c.errs.Add(invalidf("a nil option"))
			continue
		}
		o.apply(&c)
	}
	if !c.readOnly || c.clusterID != "" {
		c.checkName("ClusterID", c.clusterID, "none: pass checkpoint.ClusterID with the Kafka cluster's ID, from the brokers' metadata (optional only with ReadOnly)")
	}
	if !c.readOnly || c.group != "" {
		c.checkName("Group", c.group, "none: pass checkpoint.Group with the consumer group the store belongs to (optional only with ReadOnly)")
	}
	if c.dedupWindow < time.Second {
		c.errs.Bad("DedupWindow", c.dedupWindow, "want 1s or more")
	}
	cacheOK := c.cacheSize >= 1<<20
	if !cacheOK {
		c.errs.Bad("CacheSize", c.cacheSize, "want at least 1 MiB")
	}
	memOK := c.memTableSize >= 1<<20 && c.memTableSize <= 1<<30
	if !memOK {
		c.errs.Bad("MemTableSize", c.memTableSize, "want 1 MiB to 1 GiB")
	}
	if cacheOK && memOK && c.cacheSize < 3*int64(c.memTableSize) {
		c.errs.Bad("CacheSize", c.cacheSize,
			"memtables of %d bytes (MemTableSize) take it all: want at least 3 memtables, %d, or smaller memtables",
			c.memTableSize, 3*c.memTableSize)
	}
	c.log = c.log.With("component", defaultLogName)
	return c, c.errs.Err()
}

// checkName checks a cluster ID or group; missing says how to give one.
func (c *config) checkName(option, s, missing string) {
	switch {
	case s == "":
		c.errs.Missing(option, missing)
	case len(s) > maxNameLen:
		c.errs.Bad(option, s, "longer than %d bytes", maxNameLen)
	case !utf8.ValidString(s):
		c.errs.Bad(option, s, "not UTF-8")
	}
}

// pebbleOptions tunes Pebble for this load: small point writes synced in
// batches, point lookups of random IDs, and deletions in time order.
func (c *config) pebbleOptions(cache *pebble.Cache, lock *pebble.Lock) *pebble.Options {
	p := &pebble.Options{
		Cache:        cache,
		FS:           c.fs, // nil: Pebble wraps vfs.Default with disk-stall detection
		Lock:         lock,
		Logger:       pebbleLogger{c.log},
		MemTableSize: c.memTableSize,
		ReadOnly:     c.readOnly,
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
	// Pebble's default scheduler wakes every 100 ms while the store is
	// open; this one only while a compaction waits for a place.
	p.Experimental.CompactionScheduler = compactsched.New()
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
