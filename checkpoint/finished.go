package checkpoint

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// A worker commits a partition's offset only up to its first unfinished
// record, while records above it may finish and commit their effects. A
// restart, or the partition's next owner, must not run those again. Those
// whose dedup key is an idempotency key carry a processed-ID mark; for the
// others the partition's Offsets list them, as ranges of offsets: a
// handful of ranges even behind one slow task, where marks would cost an
// ID each.

// OffsetRange is the offsets from From up to, not including, To.
type OffsetRange struct {
	From, To int64
}

// Ranges are sorted, disjoint, non-adjacent offset ranges.
type Ranges []OffsetRange

// Contains reports whether off is in one of the ranges.
func (rs Ranges) Contains(off int64) bool {
	i, _ := slices.BinarySearchFunc(rs, off, func(r OffsetRange, off int64) int {
		switch {
		case r.To <= off:
			return -1
		case r.From > off:
			return 1
		}
		return 0
	})
	return i < len(rs) && rs[i].From <= off && off < rs[i].To
}

// String writes the ranges half-open: "[3,7) [9,10)", or "none".
func (rs Ranges) String() string {
	if len(rs) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "[%d,%d)", r.From, r.To)
	}
	return b.String()
}

// Merge returns the ranges with offs added (in any order) and everything
// below from dropped. rs is not changed.
func (rs Ranges) Merge(offs []int64, from int64) Ranges {
	var out Ranges
	add := func(r OffsetRange) {
		r.From = max(r.From, from)
		if r.From >= r.To {
			return
		}
		if n := len(out); n > 0 && out[n-1].To >= r.From {
			out[n-1].To = max(out[n-1].To, r.To)
			return
		}
		out = append(out, r)
	}
	sorted := slices.Clone(offs)
	slices.Sort(sorted)
	i := 0
	for _, r := range rs {
		for ; i < len(sorted) && sorted[i] < r.From; i++ {
			add(OffsetRange{sorted[i], sorted[i] + 1})
		}
		add(r)
	}
	for ; i < len(sorted); i++ {
		add(OffsetRange{sorted[i], sorted[i] + 1})
	}
	return out
}

// appendRanges encodes rs: a uvarint count, then per range the uvarint gap
// from the previous range's end (the first range's start, unsigned) and
// the uvarint length.
func appendRanges(dst []byte, rs Ranges) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rs)))
	prev := int64(0)
	for _, r := range rs {
		dst = binary.AppendUvarint(dst, uint64(r.From-prev))
		dst = binary.AppendUvarint(dst, uint64(r.To-r.From))
		prev = r.To
	}
	return dst
}

// readRanges decodes what appendRanges wrote and returns the rest of b.
func readRanges(b []byte) (Ranges, []byte, error) {
	n, b, ok := readUvarint(b)
	if !ok || n > uint64(len(b))/2 {
		return nil, nil, fmt.Errorf("finished ranges: bad count")
	}
	if n == 0 {
		return nil, b, nil
	}
	rs := make(Ranges, 0, n)
	prev := int64(0)
	for range n {
		var gap, length uint64
		if gap, b, ok = readUvarint(b); !ok {
			return nil, nil, fmt.Errorf("finished ranges: bad gap")
		}
		if length, b, ok = readUvarint(b); !ok || length == 0 {
			return nil, nil, fmt.Errorf("finished ranges: bad length")
		}
		from := prev + int64(gap)
		to := from + int64(length)
		if from < prev || to <= from || (len(rs) > 0 && from == prev) {
			return nil, nil, fmt.Errorf("finished ranges: range %d-%d overlaps or touches the previous one", from, to)
		}
		rs = append(rs, OffsetRange{from, to})
		prev = to
	}
	return rs, b, nil
}
