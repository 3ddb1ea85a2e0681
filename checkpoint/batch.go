package checkpoint

import (
	"cmp"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2"
)

// Bounds of one expiry record: how many IDs it lists, how far apart (in
// milliseconds) their processing times may be, and how many bytes of them
// (far below the 1 MiB a broker takes in one record by default: 4,096 IDs
// of 256 bytes would be past it).
const (
	maxRecordIDs   = 4096
	recordSpan     = 1000
	maxRecordBytes = 128 << 10
)

// Batch collects writes to any number of partitions and commits them
// atomically: after a crash, either all of a committed batch is in the store
// or none of it. A Batch is not safe for concurrent use. Close it when done,
// committed or not.
type Batch struct {
	s     *Store
	pb    *pebble.Batch
	parts []*partition             // partitions written to
	marks map[handle][]expiryEntry // IDs marked per partition, for the expiry records
	// logged are the IDs of mark records (MarkRecord), which bring their
	// expiry records with them.
	logged map[handle][]expiryEntry
	keys   map[*partition][]uint64 // hashes of the state keys set, for the filters
	key    []byte                  // scratch
	done   bool
}

// NewBatch returns an empty batch.
func (s *Store) NewBatch() *Batch {
	return &Batch{s: s, pb: s.db.NewBatch(), marks: map[handle][]expiryEntry{}, logged: map[handle][]expiryEntry{}}
}

// partition returns tp's partition, registering it in the batch.
func (b *Batch) partition(tp TP) (*partition, error) {
	if b.done {
		return nil, errorf(ErrClosed, nil, "batch already committed or closed")
	}
	p, err := b.s.register(tp)
	if err != nil {
		return nil, err
	}
	for _, q := range b.parts {
		if q == p {
			return p, nil
		}
	}
	b.parts = append(b.parts, p)
	if !p.persisted.Load() {
		if err := b.pb.Set(partitionKey(p.h), encodeTP(tp), nil); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// MarkProcessed records that the task id of tp was processed at the time at.
// Has reports it until Expire removes it, once at is older than the
// dedup window. Marking an ID again replaces its time. A worker marks the
// IDs it logs in the changelog with MarkRecord instead, so that they expire
// a record at a time.
func (b *Batch) MarkProcessed(tp TP, id string, at time.Time) error {
	if err := validateID(id); err != nil {
		return err
	}
	p, err := b.partition(tp)
	if err != nil {
		return err
	}
	ms := millis(at)
	b.key = appendIDKey(b.key[:0], p.h, id)
	var v [10]byte
	if err := b.pb.Set(b.key, encodeIDValue(v[:0], ms), nil); err != nil {
		return err
	}
	b.marks[p.h] = append(b.marks[p.h], expiryEntry{ID: id, At: ms})
	return nil
}

// unmark removes the processed ID id of tp (a changelog tombstone).
func (b *Batch) unmark(tp TP, id string) error {
	p, err := b.partition(tp)
	if err != nil {
		return err
	}
	b.key = appendIDKey(b.key[:0], p.h, id)
	return b.pb.Delete(b.key, nil)
}

// Set sets the state value of key in tp.
func (b *Batch) Set(tp TP, key, value []byte) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if len(value) > MaxValueLen {
		return invalidf("state value of %.40q: %d bytes, the limit is %d", key, len(value), MaxValueLen)
	}
	p, err := b.partition(tp)
	if err != nil {
		return err
	}
	b.key = appendStateKey(b.key[:0], p.h, key)
	if err := b.pb.Set(b.key, value, nil); err != nil {
		return err
	}
	if b.keys == nil {
		b.keys = map[*partition][]uint64{}
	}
	b.keys[p] = append(b.keys[p], keyHash(key))
	return nil
}

// Delete deletes the state value of key in tp.
func (b *Batch) Delete(tp TP, key []byte) error {
	if err := validateKey(key); err != nil {
		return err
	}
	p, err := b.partition(tp)
	if err != nil {
		return err
	}
	b.key = appendStateKey(b.key[:0], p.h, key)
	return b.pb.Delete(b.key, nil)
}

// SetOffsets sets the checkpoint of tp.
func (b *Batch) SetOffsets(tp TP, o Offsets) error {
	if err := o.validate(tp); err != nil {
		return err
	}
	p, err := b.partition(tp)
	if err != nil {
		return err
	}
	return b.pb.Set(checkpointKey(p.h), encodeOffsets(o), nil)
}

// Empty reports whether the batch holds no writes.
func (b *Batch) Empty() bool { return b.pb.Empty() }

// Commit applies the batch atomically, synced to disk unless the store was
// opened with NoSync.
// A batch commits at most once. Commit fails with ErrInvalid if a partition
// it writes to was dropped after the batch first wrote to it.
func (b *Batch) Commit() error {
	if b.done {
		return errorf(ErrClosed, nil, "batch already committed or closed")
	}
	defer b.Close()
	for h, entries := range b.marks {
		if err := writeExpiryRecords(b.pb, h, entries); err != nil {
			return err
		}
	}
	// Expiry watches for every ID the batch marks, however recorded.
	for h, entries := range b.logged {
		if len(b.marks[h]) == 0 {
			b.marks[h] = entries // nothing else reads them now
		} else {
			b.marks[h] = append(b.marks[h], entries...)
		}
	}
	s := b.s
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.release()
	if s.cfg.readOnly {
		return invalidf("store %s is open read-only", s.dir)
	}
	s.gate.RLock()
	defer s.gate.RUnlock()
	for _, p := range b.parts {
		if p.dropped.Load() {
			return invalidf("partition %s was dropped after the batch wrote to it", p.tp)
		}
	}
	// The keys join the filters before Pebble has them: a Get never
	// finds a committed key missing from its partition's filter.
	for p, hashes := range b.keys {
		p.addKeys(hashes)
	}
	seq := s.watch.begin(b.marks)
	err := s.apply(b.pb, s.wo)
	s.watch.end(seq)
	if err != nil {
		return ioError(err, "commit")
	}
	for _, p := range b.parts {
		p.persisted.Store(true)
	}
	return nil
}

// Close releases the batch, discarding it if it was not committed. Close is
// idempotent.
func (b *Batch) Close() {
	if b.pb != nil {
		_ = b.pb.Close()
		b.pb = nil
	}
	b.done = true
}

// writeExpiryRecords adds to pb the expiry records of the IDs marked in
// partition h (groupExpiry). A record is keyed by the latest time in it and
// a hash of its contents (so that equal records get equal keys), and
// expires as a whole.
func writeExpiryRecords(pb *pebble.Batch, h handle, entries []expiryEntry) error {
	for _, g := range groupExpiry(entries) {
		at, v := encodeExpiryRecord(g)
		if err := pb.Set(expiryKey(h, at, xxhash.Sum64(v)), v, nil); err != nil {
			return err
		}
	}
	return nil
}

// groupExpiry sorts entries by time and cuts them into the IDs of expiry
// records: at most maxRecordIDs IDs, marked within recordSpan, of at most
// maxRecordBytes, so that no ID outlives its window by more than recordSpan
// and a record fits in one Kafka record (a changelog mark record, see
// marks.go). It sorts entries in place.
func groupExpiry(entries []expiryEntry) [][]expiryEntry {
	slices.SortStableFunc(entries, func(a, b expiryEntry) int { return cmp.Compare(a.At, b.At) })
	var out [][]expiryEntry
	for len(entries) > 0 {
		n, size := 1, len(entries[0].ID)+8
		for n < len(entries) && n < maxRecordIDs && entries[n].At-entries[0].At < recordSpan && size+len(entries[n].ID)+8 <= maxRecordBytes {
			size += len(entries[n].ID) + 8
			n++
		}
		out = append(out, entries[:n])
		entries = entries[n:]
	}
	return out
}

// encodeExpiryRecord returns the time of the expiry record of entries (the
// latest of theirs) and its value.
func encodeExpiryRecord(entries []expiryEntry) (at uint64, value []byte) {
	size := 0
	for _, e := range entries {
		at = max(at, e.At)
		size += len(e.ID) + 4
	}
	value = make([]byte, 0, size)
	for _, e := range entries {
		value = appendExpiryEntry(value, at, e)
	}
	return at, value
}

// DropPartition removes everything of tp: offsets, processed IDs, state. Use
// it when a partition leaves this worker for good. Batches that wrote to tp
// before the drop fail to commit.
func (s *Store) DropPartition(tp TP) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.release()
	if s.cfg.readOnly {
		return invalidf("store %s is open read-only", s.dir)
	}
	s.gate.Lock()
	defer s.gate.Unlock()
	p := s.lookup(tp)
	if p == nil {
		return nil
	}
	pb := s.db.NewBatch()
	defer pb.Close()
	lower, upper := handleBounds(p.h)
	if err := pb.DeleteRange(lower, upper, nil); err != nil {
		return err
	}
	if err := pb.Delete(partitionKey(p.h), nil); err != nil {
		return err
	}
	if err := s.apply(pb, s.wo); err != nil {
		return ioError(err, "drop partition %s", tp)
	}
	s.partMu.Lock()
	defer s.partMu.Unlock()
	p.dropped.Store(true)
	s.parts.Store(s.parts.Load().without(p))
	return nil
}
