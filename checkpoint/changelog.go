package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// The changelog is a compacted Kafka topic with one partition per source
// partition, so its records carry no partition: a record's key names what it
// is about, and compaction keeps the latest record per key.
//
//	key:   byte 0 = changelog version << 4 | kind, then the ID (KindMark),
//	       the state key (KindState) or the record's time and checksum,
//	       8 bytes each, big-endian (KindMarks); nothing more for KindFence
//	       and KindFinished, of which compaction keeps the latest
//	value: byte 0 = changelog version, then uvarint unix milliseconds
//	       (KindMark), the state value (KindState), the finished ranges
//	       (KindFinished) or the IDs and their times (KindMarks, as the
//	       checkpoint's expiry record: per ID, uvarint record time minus
//	       its time, then the uvarint-length-prefixed ID); empty or null: a
//	       tombstone, the ID, key or record is deleted
//
// A live value is never empty, so a client that turns a null value into an
// empty one (or back) cannot change what a record means.
const changelogVersion = 1

// Kind is what a changelog record is about.
type Kind uint8

// The kinds of changelog records.
const (
	// KindMark is one processed ID. Workers write KindMarks now; records of
	// this kind are still read.
	KindMark  Kind = 1
	KindState Kind = 2 // a state key
	KindFence Kind = 3 // a restore's fence: nothing to apply
	// KindFinished lists the records finished above the partition's
	// committed offset as of the transaction that wrote it (Offsets.Finished).
	KindFinished Kind = 4
	// KindMarks lists the processed IDs of one commit in one partition
	// within a second (MarkRecords), removed by one tombstone when they
	// expire.
	KindMarks Kind = 5
)

func (k Kind) String() string {
	switch k {
	case KindMark:
		return "mark"
	case KindState:
		return "state"
	case KindFence:
		return "fence"
	case KindFinished:
		return "finished"
	case KindMarks:
		return "marks"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Entry is one decoded changelog record.
type Entry struct {
	// Offset is the record's offset in the changelog partition. The decoder
	// leaves it 0: the caller sets it from the Kafka record, for Apply.
	Offset int64
	Kind   Kind
	// Delete marks a tombstone: the ID or state key is removed.
	Delete bool
	// ID is the processed task ID (KindMark).
	ID string
	// At is when the ID was processed, to the millisecond (KindMark, not
	// Delete).
	At time.Time
	// Key is the state key (KindState).
	Key []byte
	// Value is the state value (KindState, not Delete).
	Value []byte
	// Finished are the finished ranges (KindFinished).
	Finished Ranges
	// Marks are the processed IDs of a mark record (KindMarks, not
	// Delete).
	Marks []Mark
	// Record names the mark record a KindMarks tombstone deletes (its
	// time and checksum); Encode of a live record ignores it.
	Record []byte
}

// Encode returns the Kafka record key and value of e (value nil for a
// tombstone). Offset is not encoded.
func (e Entry) Encode() (key, value []byte) {
	switch {
	case e.Kind == KindMark && e.Delete:
		return EncodeMarkTombstone(e.ID), nil
	case e.Kind == KindMark:
		return EncodeMark(e.ID, e.At)
	case e.Kind == KindFence:
		return EncodeFence()
	case e.Kind == KindFinished:
		return EncodeFinished(e.Finished)
	case e.Kind == KindMarks && e.Delete:
		return changelogKey(KindMarks, e.Record), nil
	case e.Kind == KindMarks:
		return EncodeMarks(e.Marks)
	case e.Delete:
		return EncodeStateTombstone(e.Key), nil
	}
	return EncodeState(e.Key, e.Value)
}

func changelogKey(kind Kind, payload []byte) []byte {
	k := make([]byte, 1, 1+len(payload))
	k[0] = changelogVersion<<4 | byte(kind)
	return append(k, payload...)
}

// EncodeMark returns the changelog record of a processed ID.
func EncodeMark(id string, at time.Time) (key, value []byte) {
	key = changelogKey(KindMark, []byte(id))
	value = binary.AppendUvarint([]byte{changelogVersion}, millis(at))
	return key, value
}

// EncodeMarkTombstone returns the key of the tombstone (a record with a null
// value) that removes a processed ID.
func EncodeMarkTombstone(id string) []byte { return changelogKey(KindMark, []byte(id)) }

// EncodeState returns the changelog record of a state write.
func EncodeState(key, value []byte) (k, v []byte) {
	v = make([]byte, 1, 1+len(value))
	v[0] = changelogVersion
	return changelogKey(KindState, key), append(v, value...)
}

// EncodeStateTombstone returns the key of the tombstone (a record with a null
// value) that deletes a state key.
func EncodeStateTombstone(key []byte) []byte { return changelogKey(KindState, key) }

// EncodeFence returns a fence record: a restore writes one to the end of a
// changelog partition and reads up to it, so that it knows it has read
// everything committed before it. All fences share one key, so compaction
// keeps one.
func EncodeFence() (key, value []byte) {
	return changelogKey(KindFence, nil), []byte{changelogVersion}
}

// EncodeFinished returns the changelog record of a partition's records
// finished above its committed offset. All share one key: compaction, and
// a replay, keep the latest.
func EncodeFinished(rs Ranges) (key, value []byte) {
	return changelogKey(KindFinished, nil), appendRanges([]byte{changelogVersion}, rs)
}

// DecodeChangelog decodes a changelog record. It fails with ErrCorrupt on
// anything this package did not write.
func DecodeChangelog(key, value []byte) (Entry, error) {
	bad := func(format string, args ...any) (Entry, error) {
		return Entry{}, errorf(ErrCorrupt, nil, "changelog record key %.40x: %s", key, fmt.Sprintf(format, args...))
	}
	if len(key) == 0 {
		return bad("empty key")
	}
	if v := key[0] >> 4; v != changelogVersion {
		return bad("changelog version %d, this onceq reads version %d", v, changelogVersion)
	}
	e := Entry{Kind: Kind(key[0] & 0x0f), Delete: len(value) == 0}
	payload := key[1:]
	if !e.Delete && value[0] != changelogVersion {
		return bad("value version %d, this onceq reads version %d", value[0], changelogVersion)
	}
	switch e.Kind {
	case KindMark:
		if len(payload) == 0 || len(payload) > MaxIDLen {
			return bad("task ID of %d bytes, want 1 to %d", len(payload), MaxIDLen)
		}
		e.ID = string(payload)
		if e.Delete {
			return e, nil
		}
		ms, n := binary.Uvarint(value[1:])
		if n <= 0 || n != len(value)-1 || ms > math.MaxInt64 {
			return bad("bad time %x", value)
		}
		e.At = fromMillis(ms)
	case KindState:
		if len(payload) == 0 || len(payload) > MaxKeyLen {
			return bad("state key of %d bytes, want 1 to %d", len(payload), MaxKeyLen)
		}
		e.Key = payload
		if e.Delete {
			return e, nil
		}
		if len(value)-1 > MaxValueLen {
			return bad("state value of %d bytes, the limit is %d", len(value)-1, MaxValueLen)
		}
		e.Value = value[1:]
	case KindFence:
		if len(payload) != 0 || e.Delete || len(value) != 1 {
			return bad("malformed fence")
		}
	case KindMarks:
		marks, err := decodeMarks(payload, value[min(1, len(value)):], e.Delete)
		if err != nil {
			return bad("%v", err)
		}
		e.Marks, e.Record = marks, payload
	case KindFinished:
		if len(payload) != 0 || e.Delete {
			return bad("malformed finished ranges")
		}
		fin, rest, err := readRanges(value[1:])
		if err != nil || len(rest) != 0 {
			return bad("malformed finished ranges %.40x", value)
		}
		e.Finished = fin
	default:
		return bad("unknown kind %d", e.Kind)
	}
	return e, nil
}

// Apply replays changelog entries into tp and records next as tp's changelog
// offset, in one atomic commit. Entries must be in increasing offset order,
// each below next; those below the changelog offset already recorded were
// applied before and are skipped, so replaying a range twice (after a crash,
// or by a second restore) leaves the store as one replay did. The source
// offset is kept as it is (-1 if the partition had no checkpoint).
//
// Apply holds everything in memory until it commits: restore in chunks of
// some thousands of entries. Do not run Apply for a partition while batches
// write to it.
func (s *Store) Apply(tp TP, entries []Entry, next int64) error {
	prev := int64(-1)
	for i, e := range entries {
		if e.Offset <= prev || e.Offset >= next {
			return invalidf("changelog entry %d of %s: offset %d, want above %d and below next offset %d: set Entry.Offset from the Kafka record",
				i, tp, e.Offset, prev, next)
		}
		prev = e.Offset
	}
	cur, ok, err := s.Checkpoint(tp)
	if err != nil {
		return err
	}
	if !ok {
		cur = Offsets{Source: -1, Changelog: -1}
	}
	if next <= cur.Changelog {
		return nil
	}
	b := s.NewBatch()
	defer b.Close()
	for _, e := range entries {
		if e.Offset < cur.Changelog {
			continue
		}
		if e.Kind == KindFinished {
			cur.Finished = e.Finished
			continue
		}
		if err := b.apply(tp, e); err != nil {
			return fmt.Errorf("%w (changelog offset %d of %s)", err, e.Offset, tp)
		}
	}
	cur.Changelog = next
	if err := b.SetOffsets(tp, cur); err != nil {
		return err
	}
	return b.Commit()
}

// apply adds one changelog entry to the batch.
func (b *Batch) apply(tp TP, e Entry) error {
	switch {
	case e.Kind == KindMark && e.Delete:
		if err := validateID(e.ID); err != nil {
			return err
		}
		return b.unmark(tp, e.ID)
	case e.Kind == KindMark:
		return b.MarkProcessed(tp, e.ID, e.At)
	case e.Kind == KindMarks && e.Delete:
		// Written when the record's IDs expired: the record, if the
		// replay restored it, holds IDs past the window, which the next
		// expiry removes.
		return nil
	case e.Kind == KindMarks:
		return b.MarkRecord(tp, e.Marks)
	case e.Kind == KindState && e.Delete:
		return b.Delete(tp, e.Key)
	case e.Kind == KindState:
		return b.Set(tp, e.Key, e.Value)
	case e.Kind == KindFence:
		return nil
	}
	return invalidf("changelog entry of unknown kind %d", e.Kind)
}
