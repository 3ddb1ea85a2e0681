package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// expireChunk is how many IDs ExpireProcessed examines and deletes in one
// write.
const expireChunk = 1024

// Why expiry never stalls commits, yet never deletes a fresh mark: expiry
// reads an ID's time, finds it old, and deletes the ID. A commit that marks
// the same ID again between the read and the delete would lose its mark.
// (The worker never does that, it only marks IDs Has reported absent, but
// Batch allows it.) So while ExpireProcessed runs, committing batches record
// the ID keys they mark in s.watch, and each chunk drops the IDs recorded
// there before it deletes, holding s.watch.mu from the check through its
// write. A commit that records after the check applies after the delete and
// so wins. ExpireProcessed starts watching under the gate, which waits for
// the commits in flight (they recorded nothing): the only moment it blocks
// commits, for at most one commit's time.
type watch struct {
	active atomic.Bool
	mu     sync.Mutex
	marked map[string]struct{} // nil unless active
}

// record notes the ID keys the batch marks, if ExpireProcessed runs. It is
// called with the gate held shared, before the batch is applied.
func (w *watch) record(marks map[handle][]expiryEntry) {
	if !w.active.Load() || len(marks) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marked == nil {
		return
	}
	var key []byte
	for h, entries := range marks {
		for _, e := range entries {
			key = appendIDKey(key[:0], h, e.ID)
			w.marked[string(key)] = struct{}{}
		}
	}
}

// start begins watching; the caller holds the gate exclusively.
func (w *watch) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marked = map[string]struct{}{}
	w.active.Store(true)
}

// stop ends watching and returns removed without the IDs marked again
// after a chunk deleted them: they are in the store, their changelog
// records must stay.
func (w *watch) stop(removed []Removed, handles map[TP]handle) []Removed {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.marked) > 0 {
		var key []byte
		removed = slices.DeleteFunc(removed, func(r Removed) bool {
			key = appendIDKey(key[:0], handles[r.TP], r.ID)
			_, ok := w.marked[string(key)]
			return ok
		})
	}
	w.marked = nil
	w.active.Store(false)
	return removed
}

// Removed is a processed ID that ExpireProcessed removed.
type Removed struct {
	TP TP
	ID string
}

// ExpireProcessed removes the processed IDs marked at or before now minus
// the dedup window, at most limit of them (limit <= 0: all), and returns
// them so that the caller can write their changelog tombstones. Fewer than
// limit removed means nothing else was due. It works in chunks and stalls
// concurrent commits only once, when it starts, for at most the time of one
// commit. A batch that marks an ID again while ExpireProcessed removes it
// keeps its mark.
//
// An ID marked again after its first mark is kept until its latest mark
// expires. The removal is not synced: after a crash some removed IDs may be
// back, and the next call removes (and returns) them again.
func (s *Store) ExpireProcessed(ctx context.Context, now time.Time, limit int) ([]Removed, error) {
	if err := s.acquire(); err != nil {
		return nil, err
	}
	defer s.release()
	if s.opts.ReadOnly {
		return nil, invalidf("store %s is open read-only", s.dir)
	}
	s.expireMu.Lock()
	defer s.expireMu.Unlock()
	if limit <= 0 {
		limit = int(^uint(0) >> 1)
	}
	s.gate.Lock()
	s.watch.start()
	s.gate.Unlock()
	handles := map[TP]handle{}
	removed, err := s.expire(ctx, now, limit, handles)
	return s.watch.stop(removed, handles), err
}

func (s *Store) expire(ctx context.Context, now time.Time, limit int, handles map[TP]handle) ([]Removed, error) {
	cutoff := millis(now.Add(-s.opts.DedupWindow))
	// Start where the last call stopped, so that a partition with a long
	// backlog does not starve the others.
	var ps []*partition
	for _, p := range s.parts.Load().byHandle {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *partition) int { return int(a.h) - int(b.h) })
	start := handle(s.expireNext.Load())
	i, _ := slices.BinarySearchFunc(ps, start, func(p *partition, h handle) int { return int(p.h) - int(h) })
	ps = append(ps[i:], ps[:i]...)

	var removed []Removed
	for _, p := range ps {
		handles[p.tp] = p.h
		var err error
		removed, err = s.expirePartition(ctx, p, cutoff, limit, removed)
		if err != nil {
			return removed, err
		}
		if len(removed) >= limit {
			s.expireNext.Store(uint32(p.h))
			return removed, nil
		}
	}
	s.expireNext.Store(0)
	return removed, nil
}

// expirePartition removes p's expired IDs, appending them to removed, until
// len(removed) reaches limit.
//
// An expiry record is deleted by the chunk that takes its last ID. When the
// call stops inside a record, the record stays whole: the next call examines
// its IDs again and skips those already removed.
func (s *Store) expirePartition(ctx context.Context, p *partition, cutoff uint64, limit int, removed []Removed) ([]Removed, error) {
	lower, _ := familyBounds(p.h, familyExpiry)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: expiryUpper(p.h, cutoff)})
	if err != nil {
		return removed, ioError(err, "expire %s", p.tp)
	}
	defer it.Close()
	var (
		cands      []expiryEntry
		finished   [][]byte      // keys of the records the chunk takes the last IDs of
		pending    []expiryEntry // IDs of the current record not yet taken
		pendingKey []byte
		ok         = it.First()
	)
	for len(removed) < limit {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		cands, finished = cands[:0], finished[:0]
		room := min(expireChunk, limit-len(removed))
		for len(cands) < room {
			if len(pending) == 0 {
				if !ok {
					break
				}
				k, err := decodeKey(it.Key())
				if err == nil {
					err = decodeExpiryRecord(k.at, it.Value(), func(e expiryEntry) { pending = append(pending, e) })
				}
				if err != nil {
					return removed, errorf(ErrCorrupt, err, "dir %s: partition %s: %v", s.dir, p.tp, err)
				}
				pendingKey = bytes.Clone(it.Key())
				ok = it.Next()
			}
			n := min(len(pending), room-len(cands))
			cands = append(cands, pending[:n]...)
			if pending = pending[n:]; len(pending) == 0 {
				finished = append(finished, pendingKey)
			}
		}
		if len(cands) == 0 && len(finished) == 0 {
			break
		}
		var err error
		if removed, err = s.expireChunk(p, cutoff, cands, finished, removed); err != nil {
			return removed, err
		}
	}
	if err := it.Error(); err != nil {
		return removed, ioError(err, "expire %s", p.tp)
	}
	return removed, nil
}

// expireChunk deletes the candidates whose ID is still marked at or before
// cutoff, and the records the chunk finished.
func (s *Store) expireChunk(p *partition, cutoff uint64, cands []expiryEntry, finished [][]byte, removed []Removed) ([]Removed, error) {
	slices.SortFunc(cands, func(a, b expiryEntry) int { return strings.Compare(a.ID, b.ID) })
	lower, upper := familyBounds(p.h, familyID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return removed, ioError(err, "expire %s", p.tp)
	}
	type due struct {
		key []byte
		e   expiryEntry
	}
	var dues []due
	for i, c := range cands {
		if i > 0 && cands[i-1].ID == c.ID {
			continue
		}
		key := appendIDKey(nil, p.h, c.ID)
		if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
			continue // removed already, or never committed
		}
		at, err := decodeIDValue(it.Value())
		if err != nil {
			_ = it.Close()
			return removed, errorf(ErrCorrupt, err, "dir %s: partition %s: %v", s.dir, p.tp, err)
		}
		if at <= cutoff { // else marked again since: its newer record expires it
			dues = append(dues, due{key, c})
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return removed, ioError(err, "expire %s", p.tp)
	}

	pb := s.db.NewBatch()
	defer pb.Close()
	for _, k := range finished {
		if err := pb.Delete(k, nil); err != nil {
			return removed, err
		}
	}
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	if p.dropped.Load() {
		return removed, nil
	}
	n := len(removed)
	var kept []expiryEntry
	for _, d := range dues {
		if _, ok := s.watch.marked[string(d.key)]; ok {
			// Marked again while we looked, maybe with an old time: keep
			// it, in a new record, as the chunk deletes the old one.
			kept = append(kept, d.e)
			continue
		}
		if err := pb.Delete(d.key, nil); err != nil {
			return removed[:n], err
		}
		removed = append(removed, Removed{TP: p.tp, ID: d.e.ID})
	}
	if err := writeExpiryRecords(pb, p.h, kept); err != nil {
		return removed[:n], err
	}
	if err := s.db.Apply(pb, pebble.NoSync); err != nil {
		return removed[:n], ioError(err, "expire %s", p.tp)
	}
	return removed, nil
}
