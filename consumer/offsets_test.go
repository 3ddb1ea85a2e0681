package consumer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOffsetSetPrefix checks the set against a plain model over random
// admissions (with gaps, as transaction markers leave) and completions in
// any order: the open offsets and the finished ones at or above the
// prefix, each kept sorted, since offsets are admitted in order.
func TestOffsetSetPrefix(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 0))
		s := newOffsetSet()
		var open, finished []int64
		next := int64(rng.IntN(1000))
		var last int64 = -1
		for range 5000 {
			if rng.IntN(3) > 0 || len(open) == 0 {
				next += 1 + int64(rng.IntN(3)) // gaps of up to 2
				if rng.IntN(500) == 0 {
					next += 100_000 // a compacted stretch
				}
				s.add(next)
				open = append(open, next)
				last = next
			} else {
				i := rng.IntN(len(open)) // any one
				off := open[i]
				if !s.done(off) {
					t.Fatalf("seed %d: done(%d) refused an open offset", seed, off)
				}
				open = slices.Delete(open, i, i+1)
				at, _ := slices.BinarySearch(finished, off)
				finished = slices.Insert(finished, at, off)
			}
			want := last + 1
			if len(open) > 0 {
				want = open[0]
			}
			if got := s.prefix(); got != want {
				t.Fatalf("seed %d: prefix %d, want %d", seed, got, want)
			}
			below, _ := slices.BinarySearch(finished, want)
			finished = finished[below:]
			if got := s.finishedAbove(); got != len(finished) {
				t.Fatalf("seed %d: finishedAbove %d, want %d", seed, got, len(finished))
			}
			if s.openCount() != len(open) {
				t.Fatalf("seed %d: openCount %d, want %d", seed, s.openCount(), len(open))
			}
		}
		if s.done(last + 5) {
			t.Fatal("done accepted an offset never admitted")
		}
	}
}

// TestOffsetSetMemory pins the set's memory: a long-open record at the
// head costs two bits per offset after it, and nothing is kept once
// nothing is open.
func TestOffsetSetMemory(t *testing.T) {
	s := newOffsetSet()
	s.add(0)
	for off := int64(1); off <= 1_000_000; off++ {
		s.add(off)
		s.done(off)
	}
	if n := len(s.open); n > 1_000_000/64+2 {
		t.Fatalf("%d words for 1,000,000 offsets", n)
	}
	s.done(0)
	if len(s.open) > 1 || s.prefix() != 1_000_001 {
		t.Fatalf("after the head finished: %d words, prefix %d", len(s.open), s.prefix())
	}
}
