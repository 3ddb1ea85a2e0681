package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
)

// The key layout (format version 1). Every key starts with a 4-byte
// big-endian partition handle; handle 0 holds the store's own keys:
//
//	00000000 'm'                 meta: format version, cluster ID, group
//	00000000 'p' h               partition registry: handle h -> (topic, partition)
//	h 'c'                        checkpoint: source and changelog offsets
//	h 'i' id                     processed ID -> processing time (uvarint unix ms)
//	h 's' key                    state value of key
//	h 'x' at(8) sum(8)           expiry record: the IDs one commit marked, at or before at;
//	                             sum is the value's xxhash, mixed with loggedSum for a
//	                             mark record the changelog holds (marks.go), whose entry
//	                             here is bare: an empty value
//
// A handle is a small number assigned to a (topic, partition) on its first
// write, so keys stay short (a topic name may be 249 bytes, repeated in 10
// million ID keys) and every key of a partition shares one prefix: dropping a
// partition is one range deletion [h, h+1).
//
// Why the expiry records. The dedup window needs the IDs in time order, Has
// needs them in ID order. Pebble orders keys one way, so the time order lives
// in a second, much cheaper structure: every commit writes, per partition,
// one record keyed by the latest processing time among the IDs it marked.
// A mark record (the changelog's, see marks.go) is bare here, its key alone,
// which names the changelog record to delete once its time is past the
// window; its IDs go by their own times, which their keys hold, found by a
// paced scan of the ID keys after the due records. A record the store groups
// itself (IDs restored from a version 1 changelog, one record each) lists its
// IDs, and expiry deletes the listed ID keys whose stored time is still
// outside the window (an ID marked again later has a newer time and a newer
// record). Compared with a secondary index key per ID (time|id), a record
// costs one key per commit instead of one per ID. Time-bucketed ID keys were
// rejected: a lookup would probe every bucket of the window. The cost,
// measured by BenchmarkBytesPerID with 10 million 36-character UUIDv7 IDs
// committed 1,000 at a time in mark records and compacted: 21.6 bytes per ID
// in sstables, nearly all of them in ID keys; 29.3 with the WAL files Pebble
// keeps for reuse (45 and 57 when mark records listed their IDs). A record
// holds the IDs one commit marked in one partition within a second (see
// batch.go); an ID outlives its window by that second and the time the scan
// takes to come round to it (a few calls of Expire).
const (
	handleLen = 4

	familyMeta       = 'm'
	familyPartition  = 'p'
	familyCheckpoint = 'c'
	familyID         = 'i'
	familyState      = 's'
	familyExpiry     = 'x'

	expiryKeyLen = handleLen + 1 + 8 + 8
)

// handle identifies a partition inside the store; 0 is the store itself.
type handle uint32

func appendHandle(dst []byte, h handle) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(h))
}

// metaKey is the key of the store's meta record.
func metaKey() []byte { return []byte{0, 0, 0, 0, familyMeta} }

// partitionKey is the registry key of handle h.
func partitionKey(h handle) []byte {
	return appendHandle([]byte{0, 0, 0, 0, familyPartition}, h)
}

// partitionKeyBounds bounds the registry keys.
func partitionKeyBounds() (lower, upper []byte) {
	return []byte{0, 0, 0, 0, familyPartition}, []byte{0, 0, 0, 0, familyPartition + 1}
}

// handleBounds bounds every key of partition h.
func handleBounds(h handle) (lower, upper []byte) {
	lower = appendHandle(nil, h)
	if h == math.MaxUint32 {
		return lower, []byte{0xff, 0xff, 0xff, 0xff, 0xff}
	}
	return lower, appendHandle(nil, h+1)
}

// familyBounds bounds the keys of one family of partition h.
func familyBounds(h handle, family byte) (lower, upper []byte) {
	return append(appendHandle(nil, h), family), append(appendHandle(nil, h), family+1)
}

func checkpointKey(h handle) []byte { return append(appendHandle(nil, h), familyCheckpoint) }

func appendIDKey(dst []byte, h handle, id string) []byte {
	return append(append(appendHandle(dst, h), familyID), id...)
}

func appendStateKey(dst []byte, h handle, key []byte) []byte {
	return append(append(appendHandle(dst, h), familyState), key...)
}

func expiryKey(h handle, at uint64, sum uint64) []byte {
	k := append(appendHandle(make([]byte, 0, expiryKeyLen), h), familyExpiry)
	k = binary.BigEndian.AppendUint64(k, at)
	return binary.BigEndian.AppendUint64(k, sum)
}

// expiryUpper is the exclusive upper bound of the expiry records of h whose
// time is at or before at.
func expiryUpper(h handle, at uint64) []byte {
	k := append(appendHandle(nil, h), familyExpiry)
	if at == math.MaxUint64 {
		return append(appendHandle(nil, h), familyExpiry+1)
	}
	return binary.BigEndian.AppendUint64(k, at+1)
}

// A decodedKey is a key split into its parts, for inspection and tests.
type decodedKey struct {
	h      handle
	family byte
	ref    handle // familyPartition: the registered handle
	rest   []byte // familyID: the ID; familyState: the state key
	at     uint64 // familyExpiry
	sum    uint64 // familyExpiry
}

// decodeKey splits a key written by this package.
func decodeKey(k []byte) (decodedKey, error) {
	if len(k) < handleLen+1 {
		return decodedKey{}, fmt.Errorf("key %x: shorter than %d bytes", k, handleLen+1)
	}
	d := decodedKey{h: handle(binary.BigEndian.Uint32(k)), family: k[handleLen]}
	rest := k[handleLen+1:]
	bad := func(what string) (decodedKey, error) {
		return decodedKey{}, fmt.Errorf("key %x: %s", k, what)
	}
	if d.h == 0 {
		switch d.family {
		case familyMeta:
			if len(rest) != 0 {
				return bad("meta key with a suffix")
			}
		case familyPartition:
			if len(rest) != handleLen {
				return bad("registry key without a 4-byte handle")
			}
			d.ref = handle(binary.BigEndian.Uint32(rest))
		default:
			return bad(fmt.Sprintf("unknown store family %q", d.family))
		}
		return d, nil
	}
	switch d.family {
	case familyCheckpoint:
		if len(rest) != 0 {
			return bad("checkpoint key with a suffix")
		}
	case familyID, familyState:
		if len(rest) == 0 {
			return bad("empty ID or state key")
		}
		d.rest = rest
	case familyExpiry:
		if len(rest) != 16 {
			return bad("expiry key without time and checksum")
		}
		d.at = binary.BigEndian.Uint64(rest)
		d.sum = binary.BigEndian.Uint64(rest[8:])
	default:
		return bad(fmt.Sprintf("unknown partition family %q", d.family))
	}
	return d, nil
}

// String formats a key for test output and inspection.
func (d decodedKey) String() string {
	switch d.family {
	case familyMeta:
		return "meta"
	case familyPartition:
		return fmt.Sprintf("partition #%d", d.ref)
	case familyCheckpoint:
		return fmt.Sprintf("#%d checkpoint", d.h)
	case familyID:
		return fmt.Sprintf("#%d id %q", d.h, d.rest)
	case familyState:
		return fmt.Sprintf("#%d state %q", d.h, d.rest)
	case familyExpiry:
		return fmt.Sprintf("#%d expiry %s %016x", d.h, formatMillis(d.at), d.sum)
	}
	return fmt.Sprintf("#%d family %q", d.h, d.family)
}

// Times are stored as unix milliseconds; times before 1970 are clamped to 0.
func millis(t time.Time) uint64 {
	ms := t.UnixMilli()
	if ms < 0 {
		return 0
	}
	return uint64(ms)
}

func fromMillis(ms uint64) time.Time {
	if ms > math.MaxInt64 {
		ms = math.MaxInt64
	}
	return time.UnixMilli(int64(ms)).UTC()
}

func formatMillis(ms uint64) string {
	if ms > 253402300799999 { // after year 9999: print the number
		return strconv.FormatUint(ms, 10)
	}
	return fromMillis(ms).Format("2006-01-02T15:04:05.000Z")
}

// The meta value: uvarint format version, then the cluster ID and the group,
// each uvarint length-prefixed. The version comes first so that a store of a
// newer format is recognised as such even if the rest differs.
type meta struct {
	Format  uint64
	Cluster string
	Group   string
}

func encodeMeta(m meta) []byte {
	b := binary.AppendUvarint(nil, m.Format)
	b = appendString(b, m.Cluster)
	return appendString(b, m.Group)
}

func decodeMeta(b []byte) (meta, error) {
	var m meta
	var ok bool
	if m.Format, b, ok = readUvarint(b); !ok {
		return meta{}, fmt.Errorf("meta value: bad format version")
	}
	if m.Format != formatVersion {
		return m, nil // the caller reports the version; the rest may differ
	}
	if m.Cluster, b, ok = readString(b); !ok {
		return meta{}, fmt.Errorf("meta value: bad cluster ID")
	}
	if m.Group, b, ok = readString(b); !ok {
		return meta{}, fmt.Errorf("meta value: bad group")
	}
	if len(b) != 0 {
		return meta{}, fmt.Errorf("meta value: %d trailing bytes", len(b))
	}
	return m, nil
}

// The offsets value: two signed varints, source then changelog, then the
// finished ranges (appendRanges) if there are any.
func encodeOffsets(o Offsets) []byte {
	b := binary.AppendVarint(binary.AppendVarint(make([]byte, 0, 2*binary.MaxVarintLen64), o.Source), o.Changelog)
	if len(o.Finished) > 0 {
		b = appendRanges(b, o.Finished)
	}
	return b
}

func decodeOffsets(b []byte) (Offsets, error) {
	var o Offsets
	n1, n2 := 0, 0
	if o.Source, n1 = binary.Varint(b); n1 <= 0 {
		return Offsets{}, fmt.Errorf("offsets value %x: bad source offset", b)
	}
	if o.Changelog, n2 = binary.Varint(b[n1:]); n2 <= 0 {
		return Offsets{}, fmt.Errorf("offsets value %x: bad changelog offset", b)
	}
	if rest := b[n1+n2:]; len(rest) > 0 {
		fin, rest, err := readRanges(rest)
		if err != nil {
			return Offsets{}, fmt.Errorf("offsets value %.40x: %w", b, err)
		}
		if len(fin) == 0 {
			// Written only when there are some.
			return Offsets{}, fmt.Errorf("offsets value %.40x: %d trailing bytes", b, len(b)-n1-n2)
		}
		if len(rest) != 0 {
			return Offsets{}, fmt.Errorf("offsets value %.40x: %d trailing bytes", b, len(rest))
		}
		o.Finished = fin
	}
	if o.Source < -1 || o.Changelog < -1 {
		return Offsets{}, fmt.Errorf("offsets value %x: offset below -1", b)
	}
	return o, nil
}

// The registry value: uvarint partition, then the topic.
func encodeTP(tp TP) []byte {
	return append(binary.AppendUvarint(nil, uint64(tp.Partition)), tp.Topic...)
}

func decodeTP(b []byte) (TP, error) {
	p, n := binary.Uvarint(b)
	if n <= 0 || p > math.MaxInt32 {
		return TP{}, fmt.Errorf("partition value %x: bad partition number", b)
	}
	tp := TP{Topic: string(b[n:]), Partition: int32(p)}
	if tp.Topic == "" || len(tp.Topic) > maxTopicLen {
		return TP{}, fmt.Errorf("partition value %x: bad topic", b)
	}
	return tp, nil
}

// The ID value: the processing time as uvarint unix milliseconds.
func encodeIDValue(dst []byte, at uint64) []byte { return binary.AppendUvarint(dst, at) }

func decodeIDValue(b []byte) (uint64, error) {
	at, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, fmt.Errorf("ID value %x: bad time", b)
	}
	return at, nil
}

// An expiry record lists IDs with their times: per ID, uvarint (record time
// minus ID time), then the uvarint-length-prefixed ID.
type expiryEntry struct {
	ID     string
	At     uint64
	logged bool // read from a mark record (expiry's own note, not stored)
}

func appendExpiryEntry(dst []byte, recordAt uint64, e expiryEntry) []byte {
	dst = binary.AppendUvarint(dst, recordAt-e.At)
	return appendString(dst, e.ID)
}

func decodeExpiryRecord(recordAt uint64, b []byte, fn func(expiryEntry)) error {
	for len(b) > 0 {
		delta, rest, ok := readUvarint(b)
		if !ok || delta > recordAt {
			return fmt.Errorf("expiry record: bad time delta")
		}
		id, rest, ok := readString(rest)
		if !ok || len(id) == 0 || len(id) > MaxIDLen {
			return fmt.Errorf("expiry record: bad ID")
		}
		fn(expiryEntry{ID: id, At: recordAt - delta})
		b = rest
	}
	return nil
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func readUvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, b, false
	}
	return v, b[n:], true
}

func readString(b []byte) (string, []byte, bool) {
	n, rest, ok := readUvarint(b)
	if !ok || n > uint64(len(rest)) {
		return "", b, false
	}
	return string(rest[:n]), rest[n:], true
}
