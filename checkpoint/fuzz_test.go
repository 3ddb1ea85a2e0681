package checkpoint

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
	"time"
)

// Every decoder of bytes read from disk or from Kafka is fuzzed: it must not
// panic, and what it accepts must encode back to something that decodes the
// same.

func FuzzDecodeChangelog(f *testing.F) {
	for _, e := range []Entry{
		{Kind: KindMark, ID: "0190b6e4-7d2a-7cc1-9a3e-5f2b8c1d4e6f", At: time.UnixMilli(1_700_000_000_123)},
		{Kind: KindMark, ID: "orders/3/1234", Delete: true},
		{Kind: KindState, Key: []byte("balance"), Value: []byte("42")},
		{Kind: KindState, Key: []byte{0}, Value: []byte{}},
		{Kind: KindState, Key: []byte("k"), Delete: true},
		{Kind: KindFinished, Finished: Ranges{{7, 9}, {12, 40}}},
		{Kind: KindFinished},
		{Kind: KindMarks, Marks: []Mark{{"0190b6e4-7d2a-7cc1-9a3e-5f2b8c1d4e6f", time.UnixMilli(1_700_000_000_100)}, {"b", time.UnixMilli(1_700_000_000_123)}}},
		{Kind: KindMarks, Delete: true, Record: make([]byte, 16)},
	} {
		k, v := e.Encode()
		f.Add(k, v)
	}
	f.Add([]byte{0x13, 'x'}, []byte{1})
	f.Add([]byte{0x11, 'x'}, []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		e, err := DecodeChangelog(key, value)
		if err != nil {
			return
		}
		k, v := e.Encode()
		e2, err := DecodeChangelog(k, v)
		if err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", e, err)
		}
		if !entriesEqual(e, e2) {
			t.Fatalf("decode(encode(%+v)) = %+v", e, e2)
		}
	})
}

// FuzzChangelogRoundTrip checks decode(encode(x)) == x for every valid entry.
func FuzzChangelogRoundTrip(f *testing.F) {
	f.Add(uint8(1), false, "task-1", int64(1_700_000_000_123), []byte(nil), []byte(nil))
	f.Add(uint8(1), true, "task-1", int64(0), []byte(nil), []byte(nil))
	f.Add(uint8(2), false, "", int64(0), []byte("k"), []byte("v"))
	f.Add(uint8(2), true, "", int64(0), []byte("k"), []byte(nil))
	f.Fuzz(func(t *testing.T, kind uint8, del bool, id string, ms int64, key, value []byte) {
		e := Entry{Kind: Kind(kind%2 + 1), Delete: del}
		if e.Kind == KindMark {
			if validateID(id) != nil || ms < 0 {
				return
			}
			e.ID = id
			if !del {
				e.At = time.UnixMilli(ms)
			}
		} else {
			if validateKey(key) != nil || len(value) > MaxValueLen {
				return
			}
			e.Key = key
			if !del {
				e.Value = append([]byte{}, value...)
			}
		}
		k, v := e.Encode()
		if del && v != nil {
			t.Fatalf("tombstone with value %x", v)
		}
		got, err := DecodeChangelog(k, v)
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		if !entriesEqual(e, got) {
			t.Fatalf("decode(encode(%+v)) = %+v", e, got)
		}
	})
}

func entriesEqual(a, b Entry) bool {
	return a.Offset == b.Offset && a.Kind == b.Kind && a.Delete == b.Delete && a.ID == b.ID &&
		a.At.Equal(b.At) && bytes.Equal(a.Key, b.Key) && bytes.Equal(a.Value, b.Value) && slices.Equal(a.Finished, b.Finished) &&
		slices.EqualFunc(a.Marks, b.Marks, func(x, y Mark) bool { return x.ID == y.ID && x.At.Equal(y.At) }) &&
		(a.Kind != KindMarks || bytes.Equal(a.Record, b.Record))
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta(meta{Format: 1, Cluster: "MkU3OEVBNTY0NzJENDZBNQ", Group: "billing"}))
	f.Add(encodeMeta(meta{Format: 1}))
	f.Add([]byte{7, 0xff})
	f.Add([]byte{1, 5, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil || m.Format != formatVersion {
			return
		}
		if m2, err := decodeMeta(encodeMeta(m)); err != nil || m2 != m {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", m, m2, err)
		}
	})
}

func FuzzDecodeOffsets(f *testing.F) {
	f.Add(encodeOffsets(Offsets{Source: 1234567, Changelog: -1}))
	f.Add(encodeOffsets(Offsets{Source: 1<<63 - 1, Changelog: 0}))
	f.Add([]byte{0x03, 0x03})
	f.Add([]byte{0x80})
	f.Add(encodeOffsets(Offsets{Source: 10, Changelog: 4, Finished: Ranges{{12, 14}, {20, 21}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := decodeOffsets(b)
		if err != nil {
			return
		}
		if o.validate(TP{"t", 0}) != nil {
			t.Fatalf("decoded invalid offsets %+v", o)
		}
		if o2, err := decodeOffsets(encodeOffsets(o)); err != nil || !reflect.DeepEqual(o2, o) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", o, o2, err)
		}
	})
}

func FuzzDecodePartition(f *testing.F) {
	f.Add(encodeTP(TP{"orders", 12}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		tp, err := decodeTP(b)
		if err != nil {
			return
		}
		if tp.validate() != nil {
			t.Fatalf("decoded invalid partition %+v", tp)
		}
		if tp2, err := decodeTP(encodeTP(tp)); err != nil || tp2 != tp {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", tp, tp2, err)
		}
	})
}

func FuzzDecodeKey(f *testing.F) {
	f.Add(metaKey())
	f.Add(partitionKey(7))
	f.Add(checkpointKey(1))
	f.Add(appendIDKey(nil, 1, "0190b6e4-7d2a-7cc1-9a3e-5f2b8c1d4e6f"))
	f.Add(appendStateKey(nil, 258, []byte("balance")))
	f.Add(expiryKey(1, 1_700_000_000_000, 12345))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeKey(b)
		if err != nil {
			return
		}
		var k []byte
		switch d.family {
		case familyMeta:
			k = metaKey()
		case familyPartition:
			k = partitionKey(d.ref)
		case familyCheckpoint:
			k = checkpointKey(d.h)
		case familyID:
			k = appendIDKey(nil, d.h, string(d.rest))
		case familyState:
			k = appendStateKey(nil, d.h, d.rest)
		case familyExpiry:
			k = expiryKey(d.h, d.at, d.sum)
		}
		if !bytes.Equal(k, b) {
			t.Fatalf("key %x decodes to %v, which encodes to %x", b, d, k)
		}
	})
}

func FuzzDecodeIDValue(f *testing.F) {
	f.Add(encodeIDValue(nil, 1_700_000_000_123))
	f.Add([]byte{0x80, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		at, err := decodeIDValue(b)
		if err != nil {
			return
		}
		if at2, err := decodeIDValue(encodeIDValue(nil, at)); err != nil || at2 != at {
			t.Fatalf("decode(encode(%d)) = %d, %v", at, at2, err)
		}
	})
}

func FuzzDecodeExpiryRecord(f *testing.F) {
	var v []byte
	for _, e := range []expiryEntry{{ID: "a", At: 1000}, {ID: "b", At: 1500}, {ID: "c", At: 999}} {
		v = appendExpiryEntry(v, 1500, e)
	}
	f.Add(uint64(1500), v)
	f.Add(uint64(0), []byte{0x05, 0x01, 'a'})
	f.Fuzz(func(t *testing.T, at uint64, b []byte) {
		var entries []expiryEntry
		if err := decodeExpiryRecord(at, b, func(e expiryEntry) { entries = append(entries, e) }); err != nil {
			return
		}
		var re []byte
		for _, e := range entries {
			if e.At > at {
				t.Fatalf("entry %+v after the record's time %d", e, at)
			}
			re = appendExpiryEntry(re, at, e)
		}
		var again []expiryEntry
		if err := decodeExpiryRecord(at, re, func(e expiryEntry) { again = append(again, e) }); err != nil || !reflect.DeepEqual(again, entries) {
			t.Fatalf("decode(encode(%v)) = %v, %v", entries, again, err)
		}
	})
}

// FuzzRangesMerge checks Merge against a set of offsets: the result holds
// exactly the offsets of the ranges and the added ones at or above from,
// as sorted, disjoint, non-adjacent ranges that survive encode and decode.
func FuzzRangesMerge(f *testing.F) {
	f.Add([]byte{1, 2, 5, 9, 9, 3}, uint8(0))
	f.Add([]byte{200, 1, 2, 3, 4}, uint8(3))
	f.Fuzz(func(t *testing.T, raw []byte, from uint8) {
		var rs Ranges
		set := map[int64]bool{}
		half := len(raw) / 2
		for _, b := range raw[:half] {
			rs = rs.Merge([]int64{int64(b)}, 0)
			set[int64(b)] = true
		}
		var offs []int64
		for _, b := range raw[half:] {
			offs = append(offs, int64(b))
			set[int64(b)] = true
		}
		got := rs.Merge(offs, int64(from))
		var n int64
		for off := range set {
			if off >= int64(from) {
				n++
				if !got.Contains(off) {
					t.Fatalf("%v lacks %d", got, off)
				}
			}
		}
		var held int64
		for _, r := range got {
			held += r.To - r.From
		}
		if held != n {
			t.Fatalf("%v holds %d offsets, want %d", got, held, n)
		}
		for i, r := range got {
			if r.From >= r.To || (i > 0 && r.From <= got[i-1].To) {
				t.Fatalf("%v: range %d overlaps, touches or is empty", got, i)
			}
		}
		back, rest, err := readRanges(appendRanges(nil, got))
		if err != nil || len(rest) != 0 || !slices.Equal(back, got) {
			t.Fatalf("decode(encode(%v)) = %v, %v", got, back, err)
		}
	})
}
