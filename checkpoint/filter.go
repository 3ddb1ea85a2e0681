package checkpoint

import (
	"math/bits"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2"
)

// Most state lookups of a busy worker are for keys that were never set: a
// handler reads a key derived from a new task's ID (its counter, its
// last result) before it writes it. Pebble answers such a miss only after
// searching its memtables and probing a Bloom filter per level, some
// microseconds each time. Each partition therefore keeps, in memory, a
// Bloom filter of the state keys it holds: a Get of a key the filter has
// never seen is answered without Pebble.
//
// The filter is built from Pebble on the partition's first Get (or by
// WarmState) and then
// kept up to date by the commits, which add their keys before their batch
// is applied, under the gate, so that a key is in the filter before it is
// in Pebble. A deleted key stays in the filter: a false positive costs the
// Pebble lookup it would have cost anyway. Once it holds more keys than it
// was sized for, its false positives climb past 1% (at twice, 10-15%) and
// the next Get rebuilds it, sized for four times as many.

const (
	filterBitsPerKey = 10 // with filterHashes: about 1% false positives
	filterHashes     = 7
)

// filterMinKeys sizes a new filter: 4Ki keys, 5 KiB a partition, so that
// a worker over ten thousand queues spends 50 MiB on them at most, and
// only on the partitions whose handlers read state. A filter grows fourfold
// each time it fills, so a partition of half a million keys rebuilds it
// five times in its life. A variable for the tests, which make it small to
// see rebuilds.
var filterMinKeys int64 = 1 << 12

// keyFilter is a Bloom filter safe for concurrent adds and lookups.
type keyFilter struct {
	words []atomic.Uint64
	mask  uint64 // bits - 1; bits is a power of two
	sized int64  // keys it was sized for
	added atomic.Int64
}

func newKeyFilter(keys int64) *keyFilter {
	n := uint64(max(keys, filterMinKeys)) * filterBitsPerKey
	nbits := uint64(1) << (64 - bits.LeadingZeros64(n-1))
	return &keyFilter{words: make([]atomic.Uint64, nbits/64), mask: nbits - 1, sized: max(keys, filterMinKeys)}
}

// keyHash is the hash of a state key the filters use.
func keyHash(key []byte) uint64 { return xxhash.Sum64(key) }

func (f *keyFilter) add(h uint64) {
	step := h>>33 | 1
	for range filterHashes {
		bit := h & f.mask
		f.words[bit>>6].Or(1 << (bit & 63))
		h += step
	}
	f.added.Add(1)
}

func (f *keyFilter) mayContain(h uint64) bool {
	step := h>>33 | 1
	for range filterHashes {
		bit := h & f.mask
		if f.words[bit>>6].Load()&(1<<(bit&63)) == 0 {
			return false
		}
		h += step
	}
	return true
}

func (f *keyFilter) overfull() bool { return f.added.Load() > f.sized }

// addKeys adds a committing batch's state keys to p's filters: the one in
// use and the one being built, if any. The caller holds the gate shared.
func (p *partition) addKeys(hashes []uint64) {
	for _, f := range [...]*keyFilter{p.filter.Load(), p.building.Load()} {
		if f == nil {
			continue
		}
		for _, h := range hashes {
			f.add(h)
		}
	}
}

// WarmState builds tp's state filter now, rather than on its first Get: a
// worker calls it when it restores a partition, while the partition's
// records wait anyway.
func (s *Store) WarmState(tp TP) error {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.release()
	p := s.lookup(tp)
	if p == nil {
		return nil
	}
	// A partition with no state yet builds its filter on its first Get:
	// most queues' handlers never read state, and a worker over thousands
	// of queues would otherwise keep a filter for each.
	lower, upper := familyBounds(p.h, familyState)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return ioError(err, "read the state keys of %s", p.tp)
	}
	some := it.First()
	if err := it.Close(); err != nil {
		return ioError(err, "read the state keys of %s", p.tp)
	}
	if !some {
		return nil
	}
	_, err = s.stateFilter(p)
	return err
}

// stateFilter returns p's filter, building it from Pebble first if it has
// none or it is overfull.
func (s *Store) stateFilter(p *partition) (*keyFilter, error) {
	if f := p.filter.Load(); f != nil && !f.overfull() {
		return f, nil
	}
	p.filterMu.Lock()
	defer p.filterMu.Unlock()
	old := p.filter.Load()
	if old != nil && !old.overfull() {
		return old, nil
	}
	size := filterMinKeys
	if old != nil {
		size = 4 * old.added.Load()
	}
	f := newKeyFilter(size)
	// Commits from here on add their keys to f too; the iterator, taken
	// with no commit in flight, sees every key committed before.
	lower, upper := familyBounds(p.h, familyState)
	s.gate.Lock()
	p.building.Store(f)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	s.gate.Unlock()
	if err != nil {
		p.building.Store(nil)
		return nil, ioError(err, "read the state keys of %s", p.tp)
	}
	for ok := it.First(); ok; ok = it.Next() {
		f.add(keyHash(it.Key()[len(lower):]))
	}
	err = it.Close()
	s.gate.Lock()
	if err == nil {
		p.filter.Store(f)
	}
	p.building.Store(nil)
	s.gate.Unlock()
	if err != nil {
		return nil, ioError(err, "read the state keys of %s", p.tp)
	}
	return f, nil
}
