package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TP identifies a Kafka partition: a topic and a partition number.
type TP struct {
	Topic     string
	Partition int32
}

// String returns "topic/partition".
func (tp TP) String() string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

func (tp TP) validate() error {
	switch {
	case tp.Topic == "":
		return invalidf("partition %s: empty topic", tp)
	case len(tp.Topic) > maxTopicLen:
		return invalidf("partition %.40q...: topic longer than %d bytes", tp.Topic, maxTopicLen)
	case tp.Partition < 0:
		return invalidf("partition %s: negative partition number", tp)
	}
	return nil
}

// Offsets is a partition's checkpoint. Both are Kafka's "next offset": the
// offset of the first record not yet covered, as in a committed consumer
// offset. -1 means unknown.
type Offsets struct {
	// Source is the next offset of the source partition to process.
	Source int64
	// Changelog is the next offset of the partition's changelog to replay.
	Changelog int64
	// Finished are records above Source whose results are committed: a
	// worker acknowledges them without running them again.
	Finished Ranges
}

func (o Offsets) String() string {
	s := fmt.Sprintf("{Source:%d Changelog:%d", o.Source, o.Changelog)
	if len(o.Finished) > 0 {
		s += " Finished:" + o.Finished.String()
	}
	return s + "}"
}

func (o Offsets) validate(tp TP) error {
	if o.Source < -1 || o.Changelog < -1 {
		return invalidf("offsets of %s: source %d, changelog %d: want -1 (unknown) or above", tp, o.Source, o.Changelog)
	}
	return nil
}

// Store is a checkpoint store in one directory. All methods are safe for
// concurrent use. See the package documentation.
type Store struct {
	db   *pebble.DB
	fs   vfs.FS
	lock *pebble.Lock
	dir  string
	cfg  config
	meta meta
	wo   *pebble.WriteOptions
	log  *slog.Logger

	// mu is held shared by every operation and exclusively by Close.
	mu     sync.RWMutex
	closed bool
	failed atomic.Bool // Pebble hit a fatal error: see ErrFailed

	// gate is held shared while a batch is applied and exclusively by
	// DropPartition.
	gate  sync.RWMutex
	watch *watch // see expire.go

	// parts is an immutable snapshot of the partition registry, replaced
	// (copy on write, under partMu) when a partition is added or dropped.
	partMu     sync.Mutex
	parts      atomic.Pointer[partitions]
	nextHandle handle

	expireMu      sync.Mutex    // one Expire at a time
	expireNext    atomic.Uint32 // the handle where the next Expire starts
	expireScanned int64         // ID keys the scans examined; guarded by expireMu
}

// A partition is a registered (topic, partition) and its handle.
type partition struct {
	tp        TP
	h         handle
	persisted atomic.Bool // its registry key is committed
	dropped   atomic.Bool

	// The Bloom filter of its state keys (filter.go): the one in use,
	// and the one being built from Pebble, by one builder at a time.
	filter, building atomic.Pointer[keyFilter]
	filterMu         sync.Mutex

	// Expire's scan of the partition's IDs (Store.expireScan), guarded by
	// Store.expireMu. A round is under way while scanning: scanFrom is the
	// ID key where the next call goes on (nil: the first) and scanStart
	// the round's first cutoff. scanCovered is the time up to which the
	// last whole round took every ID, and walkedUntil the latest time of
	// a bare mark record the walk took (at open, unknown until the first
	// call sets it to that call's cutoff): a round runs only while
	// walkedUntil is later than scanCovered.
	scanning, walkedKnown               bool
	scanFrom                            []byte
	walkedUntil, scanCovered, scanStart uint64
}

type partitions struct {
	byTP     map[TP]*partition
	byHandle map[handle]*partition
}

// Open opens the checkpoint store in dir, creating it if needed (unless
// ReadOnly). It refuses options with ErrInvalid, naming every refused
// option at once (see onceq.Options), before it touches dir. It fails
// with ErrInUse if another process holds dir, with
// ErrMismatch if dir belongs to another cluster or group, with ErrCorrupt if
// dir holds something else, and with ErrVersion if dir was written in an
// unknown format. Close the store when done.
func Open(dir string, opts ...Opt) (*Store, error) {
	cfg, err := build(opts)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, invalidf("empty directory name")
	}
	fs := cfg.fs
	if fs == nil {
		fs = vfs.Default
	}
	if cfg.readOnly {
		// Look before locking: the lock would leave a LOCK file behind.
		if fi, err := fs.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil, errorf(ErrNotFound, err, "dir %s does not exist", dir)
		} else if err == nil && !fi.IsDir() {
			return nil, errorf(ErrNotFound, nil, "%s is a file, not a checkpoint store's directory: give the store's directory (<checkpoint dir>/store)", dir)
		}
		if desc, err := pebble.Peek(dir, fs); err == nil && !desc.Exists {
			return nil, errorf(ErrNotFound, nil, "dir %s holds no checkpoint store", dir)
		}
	} else if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, ioError(err, "create dir %s", dir)
	}
	lock, err := pebble.LockDirectory(dir, fs)
	switch {
	case err != nil && cfg.readOnly && unwritable(err):
		if lock, err = readOnlyLock(dir, fs); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, lockError(dir, cfg.fs, err)
	}
	s, err := open(dir, fs, lock, &cfg)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	return s, nil
}

func open(dir string, fs vfs.FS, lock *pebble.Lock, cfg *config) (*Store, error) {
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return nil, errorf(ErrCorrupt, err, "dir %s: cannot read the store's format (%v): move the directory away", dir, err)
	}
	if !desc.Exists {
		if cfg.readOnly {
			return nil, errorf(ErrNotFound, nil, "dir %s holds no checkpoint store", dir)
		}
		if err := checkEmpty(dir, fs); err != nil {
			return nil, err
		}
	}
	cache := pebble.NewCache(cfg.cacheSize)
	defer cache.Unref()
	db, err := pebble.Open(dir, cfg.pebbleOptions(cache, lock))
	if err != nil {
		if pebble.IsCorruptionError(err) {
			return nil, errorf(ErrCorrupt, err, "dir %s: %v", dir, err)
		}
		return nil, ioError(err, "open dir %s", dir)
	}
	s := &Store{
		db:    db,
		fs:    fs,
		lock:  lock,
		dir:   dir,
		cfg:   *cfg,
		wo:    pebble.Sync,
		watch: newWatch(),
		log:   cfg.log.With("dir", dir),
	}
	if cfg.noSync {
		s.wo = pebble.NoSync
	}
	if err := s.checkMeta(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.loadPartitions(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.log.Debug("checkpoint store open", "cluster", s.meta.Cluster, "group", s.meta.Group,
		"partitions", len(s.parts.Load().byTP))
	return s, nil
}

// pebbleFile matches the names of the files Pebble keeps in its directory.
var pebbleFile = regexp.MustCompile(`^(LOCK|CURRENT|MANIFEST-\d+|OPTIONS-\d+|\d+\.(log|sst|blob)|marker\..*|.*\.dbtmp)$`)

// checkEmpty refuses a directory that holds files other than Pebble's: a
// checkpoint dir pointed by mistake at a directory with other data.
func checkEmpty(dir string, fs vfs.FS) error {
	names, err := fs.List(dir)
	if err != nil {
		return ioError(err, "list dir %s", dir)
	}
	var other []string
	for _, n := range names {
		if !pebbleFile.MatchString(n) {
			other = append(other, n)
		}
	}
	if len(other) == 0 {
		return nil
	}
	slices.Sort(other)
	if len(other) > 3 {
		other = append(other[:3], "...")
	}
	return errorf(ErrCorrupt, nil, "dir %s is not empty (%s) and holds no checkpoint store: use an empty or new directory",
		dir, strings.Join(other, ", "))
}

// checkMeta reads the meta record, or writes it into a new store.
func (s *Store) checkMeta() error {
	v, closer, err := s.db.Get(metaKey())
	if errors.Is(err, pebble.ErrNotFound) {
		return s.createMeta()
	}
	if err != nil {
		return ioError(err, "dir %s: read meta", s.dir)
	}
	m, err := decodeMeta(v)
	_ = closer.Close()
	if err != nil {
		return errorf(ErrCorrupt, err, "dir %s: %v: the directory is damaged or not an onceq checkpoint store: move it away", s.dir, err)
	}
	if m.Format != formatVersion {
		return errorf(ErrVersion, nil, "dir %s has checkpoint format version %d; this onceq reads version %d: use the onceq release that wrote it, or another directory",
			s.dir, m.Format, formatVersion)
	}
	if (s.cfg.clusterID != "" && m.Cluster != s.cfg.clusterID) || (s.cfg.group != "" && m.Group != s.cfg.group) {
		return errorf(ErrMismatch, nil, "dir %s belongs to group %q of cluster %q, not group %q of cluster %q: use another --checkpoint-dir or the right --group",
			s.dir, m.Group, m.Cluster, s.cfg.group, s.cfg.clusterID)
	}
	s.meta = m
	return nil
}

// createMeta writes the meta record of a new store. A store with keys but no
// meta record is refused: whatever wrote it, it was not this package.
func (s *Store) createMeta() error {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return ioError(err, "dir %s: read", s.dir)
	}
	empty := !it.First()
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return ioError(err, "dir %s: read", s.dir)
	}
	switch {
	case !empty:
		return errorf(ErrCorrupt, nil, "dir %s holds a Pebble store without onceq meta: move it away", s.dir)
	case s.cfg.readOnly:
		return errorf(ErrNotFound, nil, "dir %s holds an empty checkpoint store", s.dir)
	}
	s.meta = meta{Format: formatVersion, Cluster: s.cfg.clusterID, Group: s.cfg.group}
	if err := s.db.Set(metaKey(), encodeMeta(s.meta), pebble.Sync); err != nil {
		return ioError(err, "dir %s: write meta", s.dir)
	}
	return nil
}

func (s *Store) loadPartitions() error {
	lower, upper := partitionKeyBounds()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return ioError(err, "dir %s: read partitions", s.dir)
	}
	defer it.Close()
	ps := &partitions{byTP: map[TP]*partition{}, byHandle: map[handle]*partition{}}
	for ok := it.First(); ok; ok = it.Next() {
		k, err := decodeKey(it.Key())
		if err != nil {
			return errorf(ErrCorrupt, err, "dir %s: %v", s.dir, err)
		}
		tp, err := decodeTP(it.Value())
		if err != nil || k.ref == 0 || ps.byTP[tp] != nil {
			return errorf(ErrCorrupt, err, "dir %s: bad partition record %x = %x", s.dir, it.Key(), it.Value())
		}
		p := &partition{tp: tp, h: k.ref}
		p.persisted.Store(true)
		ps.byTP[tp], ps.byHandle[k.ref] = p, p
		s.nextHandle = max(s.nextHandle, k.ref)
	}
	if err := it.Error(); err != nil {
		return ioError(err, "dir %s: read partitions", s.dir)
	}
	s.nextHandle++
	s.parts.Store(ps)
	return nil
}

// Close closes the store. It waits for running operations; later calls fail
// with ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.failed.Load() {
		// Pebble's state is unknown after a fatal error: its Close may
		// block or panic. Give it a moment, then leave the rest to the
		// process's exit.
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { _ = recover() }()
			_ = s.db.Close()
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		_ = s.lock.Close()
		return nil
	}
	err := s.db.Close()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return ioError(err, "close dir %s", s.dir)
	}
	return nil
}

// Err returns an ErrFailed error once Pebble hit a fatal error (a failed
// write or sync): from then on every operation fails, and the store must
// be closed and opened again. It is nil while the store works.
func (s *Store) Err() error {
	if s.failed.Load() {
		return errorf(ErrFailed, nil, "store %s failed: reopen it", s.dir)
	}
	return nil
}

// acquire holds the store open for one operation: call release when done.
func (s *Store) acquire() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return errorf(ErrClosed, nil, "store %s is closed", s.dir)
	}
	if s.failed.Load() {
		s.mu.RUnlock()
		return errorf(ErrFailed, nil, "store %s failed: reopen it", s.dir)
	}
	return nil
}

// apply commits a Pebble batch, turning Pebble's fatal errors (which it
// reports by panicking through the logger) into ErrFailed.
func (s *Store) apply(pb *pebble.Batch, wo *pebble.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			s.failed.Store(true)
			err = errorf(ErrFailed, f.err, "store %s: %v", s.dir, f.err)
		}
	}()
	return s.db.Apply(pb, wo)
}

func (s *Store) release() { s.mu.RUnlock() }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Identity returns the cluster ID and group recorded in the store.
func (s *Store) Identity() (clusterID, group string) { return s.meta.Cluster, s.meta.Group }

// lookup returns the partition of tp, or nil if it has no data.
func (s *Store) lookup(tp TP) *partition { return s.parts.Load().byTP[tp] }

// register returns the partition of tp, assigning a handle if it has none.
func (s *Store) register(tp TP) (*partition, error) {
	if p := s.lookup(tp); p != nil {
		return p, nil
	}
	if err := tp.validate(); err != nil {
		return nil, err
	}
	s.partMu.Lock()
	defer s.partMu.Unlock()
	old := s.parts.Load()
	if p := old.byTP[tp]; p != nil {
		return p, nil
	}
	if s.nextHandle == math.MaxUint32 {
		return nil, invalidf("partition %s: out of partition handles: the store registered 4 billion partitions", tp)
	}
	p := &partition{tp: tp, h: s.nextHandle}
	s.nextHandle++
	s.parts.Store(old.with(p))
	return p, nil
}

// with returns a copy of ps with p added.
func (ps *partitions) with(p *partition) *partitions {
	n := &partitions{byTP: make(map[TP]*partition, len(ps.byTP)+1), byHandle: make(map[handle]*partition, len(ps.byTP)+1)}
	for tp, q := range ps.byTP {
		n.byTP[tp], n.byHandle[q.h] = q, q
	}
	if p != nil {
		n.byTP[p.tp], n.byHandle[p.h] = p, p
	}
	return n
}

// without returns a copy of ps with p removed.
func (ps *partitions) without(p *partition) *partitions {
	n := ps.with(nil)
	delete(n.byTP, p.tp)
	delete(n.byHandle, p.h)
	return n
}

// Partitions returns the partitions that have data in the store (offsets,
// processed IDs or state), sorted by topic and partition.
func (s *Store) Partitions() ([]TP, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.release()
	return s.partitionsLocked()
}

func (s *Store) partitionsLocked() ([]TP, error) {
	var tps []TP
	for tp, p := range s.parts.Load().byTP {
		if p.persisted.Load() {
			tps = append(tps, tp)
		}
	}
	slices.SortFunc(tps, compareTP)
	return tps, nil
}

func compareTP(a, b TP) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

// Checkpoint returns the offsets of tp; false if none were recorded.
func (s *Store) Checkpoint(tp TP) (Offsets, bool, error) {
	v, ok, err := s.get(tp, func(p *partition) ([]byte, error) { return checkpointKey(p.h), nil })
	if err != nil || !ok {
		return Offsets{}, false, err
	}
	o, err := decodeOffsets(v)
	if err != nil {
		return Offsets{}, false, errorf(ErrCorrupt, err, "dir %s: partition %s: %v", s.dir, tp, err)
	}
	return o, true, nil
}

// Get returns the state value of key in tp; false if there is none.
func (s *Store) Get(tp TP, key []byte) ([]byte, bool, error) {
	if err := validateKey(key); err != nil {
		return nil, false, err
	}
	return s.get(tp, func(p *partition) ([]byte, error) {
		f, err := s.stateFilter(p)
		if err != nil || !f.mayContain(keyHash(key)) {
			return nil, err // never set: no need to ask Pebble
		}
		return appendStateKey(nil, p.h, key), nil
	})
}

// get reads the value of a key of tp that key builds (nil: there is none
// to read); it returns a copy.
func (s *Store) get(tp TP, key func(*partition) ([]byte, error)) ([]byte, bool, error) {
	if err := s.acquire(); err != nil {
		return nil, false, err
	}
	defer s.release()
	p := s.lookup(tp)
	if p == nil {
		return nil, false, nil
	}
	k, err := key(p)
	if err != nil || k == nil {
		return nil, false, err
	}
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, ioError(err, "read %s", p.tp)
	}
	v = bytes.Clone(v)
	_ = closer.Close()
	return v, true, nil
}

// Has reports whether id was marked processed in tp (and not yet expired).
func (s *Store) Has(tp TP, id string) (bool, error) {
	if err := validateID(id); err != nil {
		return false, err
	}
	if err := s.acquire(); err != nil {
		return false, err
	}
	defer s.release()
	p := s.lookup(tp)
	if p == nil {
		return false, nil
	}
	var buf [64]byte
	_, closer, err := s.db.Get(appendIDKey(buf[:0], p.h, id))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, ioError(err, "read %s", tp)
	}
	_ = closer.Close()
	return true, nil
}

// HasMany reports for each of ids whether it was marked processed in tp. It
// is faster than calling Has for each: it looks the IDs up in key order with
// one iterator, so neighbouring IDs share the blocks they are read from.
func (s *Store) HasMany(tp TP, ids []string) ([]bool, error) {
	for _, id := range ids {
		if err := validateID(id); err != nil {
			return nil, err
		}
	}
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.release()
	found := make([]bool, len(ids))
	p := s.lookup(tp)
	if p == nil || len(ids) == 0 {
		return found, nil
	}
	order := make([]int32, len(ids))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(ids[a], ids[b]) })
	lower, upper := familyBounds(p.h, familyID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, ioError(err, "read %s", tp)
	}
	key := make([]byte, 0, 64)
	for _, i := range order {
		key = appendIDKey(key[:0], p.h, ids[i])
		// SeekPrefixGE consults the bloom filters; with the default
		// comparer the prefix is the whole key.
		found[i] = it.SeekPrefixGE(key) && bytes.Equal(it.Key(), key)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, ioError(err, "read %s", tp)
	}
	return found, nil
}

func validateID(id string) error {
	if len(id) == 0 || len(id) > MaxIDLen {
		return invalidf("task ID %.40q: want 1 to %d bytes, got %d", id, MaxIDLen, len(id))
	}
	return nil
}

func validateKey(key []byte) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return invalidf("state key %.40q: want 1 to %d bytes, got %d", key, MaxKeyLen, len(key))
	}
	return nil
}
