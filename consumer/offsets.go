package consumer

import "math/bits"

// offsetSet tracks the records of one partition that a worker admitted
// above its committed offset: which are still open (admitted and not
// finished). The offset a commit may move the partition to is its first
// open offset, or the one after the last admitted record when none is
// open: it never passes an unfinished record. Records finished above it
// are covered by their processed-ID marks.
//
// Two bitmaps from base, a multiple of 64, hold one bit per offset; words
// below the first open offset are dropped as the prefix moves, so the set
// costs two bits per offset between the oldest open record and the newest
// admitted one. Offsets never admitted (transaction markers, aborted or
// compacted records) are neither admitted nor open.
type offsetSet struct {
	base      int64
	admitted  []uint64
	open      []uint64
	nAdmitted int   // admitted bits set
	nOpen     int   // open bits set
	next      int64 // the offset after the last admitted record; -1 before the first
}

func newOffsetSet() offsetSet { return offsetSet{next: -1} }

// add admits off, which must be above every offset admitted before.
func (s *offsetSet) add(off int64) {
	if s.nOpen == 0 {
		// Nothing open: nothing below off needs remembering.
		s.base = off &^ 63
		s.admitted, s.open = s.admitted[:0], s.open[:0]
		s.nAdmitted = 0
	}
	i := int((off - s.base) >> 6)
	for len(s.admitted) <= i {
		s.admitted = append(s.admitted, 0)
		s.open = append(s.open, 0)
	}
	bit := uint64(1) << uint((off-s.base)&63)
	s.admitted[i] |= bit
	s.open[i] |= bit
	s.nAdmitted++
	s.nOpen++
	s.next = off + 1
}

// done marks off finished. It reports false if off is not open.
func (s *offsetSet) done(off int64) bool {
	if off < s.base {
		return false
	}
	i := int((off - s.base) >> 6)
	bit := uint64(1) << uint((off-s.base)&63)
	if i >= len(s.open) || s.open[i]&bit == 0 {
		return false
	}
	s.open[i] &^= bit
	s.nOpen--
	// Drop the leading words with nothing open that lie wholly below next.
	for len(s.open) > 0 && s.open[0] == 0 && s.base+64 <= s.next {
		s.nAdmitted -= bits.OnesCount64(s.admitted[0])
		s.admitted, s.open = s.admitted[1:], s.open[1:]
		s.base += 64
	}
	return true
}

// prefix is the offset a commit may move the partition to: the first open
// offset, or next when nothing is open (-1 when nothing was admitted).
func (s *offsetSet) prefix() int64 {
	if s.nOpen == 0 {
		return s.next
	}
	for i, w := range s.open {
		if w != 0 {
			return s.base + int64(i)<<6 + int64(bits.TrailingZeros64(w))
		}
	}
	return s.next // unreachable: nOpen counts the bits
}

// openCount is how many admitted records are not finished.
func (s *offsetSet) openCount() int { return s.nOpen }

// finishedAbove is how many admitted records at or above the prefix are
// finished: the ones a restart would find by their marks.
func (s *offsetSet) finishedAbove() int {
	if s.nOpen == 0 {
		return 0
	}
	p := s.prefix()
	below := 0 // admitted bits from base up to the prefix
	for i := range s.admitted {
		lo := s.base + int64(i)<<6
		if lo+64 <= p {
			below += bits.OnesCount64(s.admitted[i])
			continue
		}
		below += bits.OnesCount64(s.admitted[i] & (uint64(1)<<uint(p-lo) - 1))
		break
	}
	return s.nAdmitted - below - s.nOpen
}
