package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Mark records, the changelog's form of processed IDs.
//
// A commit marks its idempotency keys in one changelog record per
// partition (KindMarks), not one per ID: the record's value is encoded as
// an expiry record of those IDs (see keys.go), and the store keeps, under
// the same time and checksum, a bare expiry record: the key alone, with an
// empty value. Restoring the record writes the same bare record. Once its
// time is past the dedup window, expiry removes the whole changelog record
// with one tombstone, and the IDs go by their own times, found by a scan
// of the ID keys (Store.expireScan). Keeping the IDs once, in their keys,
// halves the bytes a marked ID costs the store, and the flushes and
// compactions that move them. The changelog's version 1 KindMark records,
// one per ID, are still read; the IDs they restore expire with a tombstone
// each, as before.
//
// The checksum of a logged expiry record is its changelog value's xxhash
// with loggedSum mixed in. An expiry record with IDs whose checksum is its
// own value's plain xxhash is one the store grouped itself (restored from
// KindMark records, or rewritten by expiry), whose IDs have records of
// their own. Stores written before mark records went bare hold them with
// their IDs and the logged checksum; expiry reads both kinds.
const loggedSum = 0x6f6e6365712d6d6b // "onceq-mk"

// Mark is one processed ID of a mark record.
type Mark struct {
	ID string
	At time.Time // to the millisecond
}

// MarkRecords groups the IDs one commit marked in one partition into
// changelog entries of KindMarks, as the checkpoint groups them in expiry
// records (groupExpiry: by time, at most 4,096 IDs within a second and 128
// KiB each). Write the entries to the changelog and commit them with
// Batch.MarkRecord (or Apply them), so that both hold the same records.
func MarkRecords(marks []Mark) []Entry {
	var out []Entry
	for _, g := range groupExpiry(expiryEntries(marks)) {
		e := Entry{Kind: KindMarks, Marks: make([]Mark, len(g))}
		for i, x := range g {
			e.Marks[i] = Mark{ID: x.ID, At: fromMillis(x.At)}
		}
		out = append(out, e)
	}
	return out
}

func expiryEntries(marks []Mark) []expiryEntry {
	es := make([]expiryEntry, len(marks))
	for i, m := range marks {
		es[i] = expiryEntry{ID: m.ID, At: millis(m.At)}
	}
	return es
}

// markRecord encodes marks as an expiry record: its time, the value and
// the logged checksum.
func markRecord(marks []Mark) (at uint64, value []byte, sum uint64) {
	return markRecordOf(expiryEntries(marks))
}

// markRecordOf is markRecord of the marks' entries, in their order.
func markRecordOf(entries []expiryEntry) (at uint64, value []byte, sum uint64) {
	at, value = encodeExpiryRecord(entries)
	return at, value, xxhash.Sum64(value) ^ loggedSum
}

// markRecordKey is the changelog key payload of a mark record: its time
// and checksum, as in its expiry key.
func markRecordKey(at, sum uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 16), at), sum)
}

// EncodeMarks returns the changelog record of marks, a KindMarks entry's
// IDs.
func EncodeMarks(marks []Mark) (key, value []byte) {
	at, v, sum := markRecord(marks)
	return changelogKey(KindMarks, markRecordKey(at, sum)), append([]byte{changelogVersion}, v...)
}

// decodeMarks decodes a mark record's key payload and value (after the
// version byte); payload alone for a tombstone.
func decodeMarks(payload, value []byte, tombstone bool) ([]Mark, error) {
	if len(payload) != 16 {
		return nil, fmt.Errorf("mark record key of %d bytes, want 16", len(payload))
	}
	if tombstone {
		return nil, nil
	}
	at, sum := binary.BigEndian.Uint64(payload), binary.BigEndian.Uint64(payload[8:])
	if at > math.MaxInt64 {
		return nil, fmt.Errorf("mark record time %d out of range", at)
	}
	if xxhash.Sum64(value)^loggedSum != sum {
		return nil, fmt.Errorf("mark record checksum %016x does not match its value", sum)
	}
	var marks []Mark
	var latest uint64
	err := decodeExpiryRecord(at, value, func(e expiryEntry) {
		marks = append(marks, Mark{ID: e.ID, At: fromMillis(e.At)})
		latest = max(latest, e.At)
	})
	if err != nil {
		return nil, fmt.Errorf("mark record: %w", err)
	}
	if len(marks) == 0 || latest != at {
		return nil, fmt.Errorf("mark record of %d IDs, the latest at %d, keyed %d", len(marks), latest, at)
	}
	return marks, nil
}

// MarkRecord marks the IDs of a KindMarks entry processed in tp, writing
// the expiry record the changelog holds, so that expiring it yields the
// record's tombstone.
func (b *Batch) MarkRecord(tp TP, marks []Mark) error {
	if len(marks) == 0 {
		return invalidf("mark record without IDs")
	}
	for _, m := range marks {
		if err := validateID(m.ID); err != nil {
			return err
		}
	}
	p, err := b.partition(tp)
	if err != nil {
		return err
	}
	// The changelog's value is encoded in the marks' order; then the
	// same entries, sorted, are the ID keys and what expiry watches.
	entries := expiryEntries(marks)
	at, _, sum := markRecordOf(entries)
	// The ID keys go in in order: Pebble inserts sorted keys at a third
	// of the cost of random ones.
	slices.SortFunc(entries, func(a, b expiryEntry) int { return strings.Compare(a.ID, b.ID) })
	var iv [10]byte
	for _, e := range entries {
		b.key = appendIDKey(b.key[:0], p.h, e.ID)
		if err := b.pb.Set(b.key, encodeIDValue(iv[:0], e.At), nil); err != nil {
			return err
		}
	}
	if b.logged[p.h] == nil {
		b.logged[p.h] = entries
	} else {
		b.logged[p.h] = append(b.logged[p.h], entries...)
	}
	// The record's entry is bare: its key names the changelog record, and
	// its IDs expire by their own times (Store.expireScan).
	return b.pb.Set(expiryKey(p.h, at, sum), nil, nil)
}

// isLogged reports whether an expiry record is a mark record the changelog
// holds: a bare one (MarkRecord), or one written with its IDs before mark
// records went bare.
func isLogged(sum uint64, value []byte) bool {
	return len(value) == 0 || xxhash.Sum64(value)^loggedSum == sum
}
