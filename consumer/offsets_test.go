package consumer

import (
	"math/rand/v2"
	"testing"
)

// TestOffsetSetPrefix checks the set against a plain map of open offsets
// over random admissions (with gaps, as transaction markers leave) and
// completions in any order.
func TestOffsetSetPrefix(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 0))
		s := newOffsetSet()
		open := map[int64]bool{}
		admittedAbove := map[int64]bool{}
		next := int64(rng.IntN(1000))
		var last int64 = -1
		for range 5000 {
			if rng.IntN(3) > 0 || len(open) == 0 {
				next += 1 + int64(rng.IntN(3)) // gaps of up to 2
				if rng.IntN(500) == 0 {
					next += 100_000 // a compacted stretch
				}
				s.add(next)
				open[next], admittedAbove[next] = true, true
				last = next
			} else {
				for off := range open { // any one
					if !s.done(off) {
						t.Fatalf("seed %d: done(%d) refused an open offset", seed, off)
					}
					delete(open, off)
					break
				}
			}
			want := last + 1
			for off := range open {
				want = min(want, off)
			}
			if got := s.prefix(); got != want {
				t.Fatalf("seed %d: prefix %d, want %d", seed, got, want)
			}
			above := 0
			for off := range admittedAbove {
				if off < want {
					delete(admittedAbove, off)
				} else if !open[off] {
					above++
				}
			}
			if got := s.finishedAbove(); got != above {
				t.Fatalf("seed %d: finishedAbove %d, want %d", seed, got, above)
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
