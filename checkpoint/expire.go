package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// expireChunk is how many IDs ExpireProcessed examines while it holds the
// gate. Commits wait for at most one chunk: a few hundred seeks and one
// unsynced write, well under a millisecond.
const expireChunk = 256

// Removed is a processed ID that ExpireProcessed removed.
type Removed struct {
	TP TP
	ID string
}

// ExpireProcessed removes the processed IDs marked at or before now minus
// the dedup window, at most limit of them (limit <= 0: all), and returns
// them so that the caller can write their changelog tombstones. Fewer than
// limit removed means nothing else was due. It works in small chunks and
// does not stall concurrent commits for more than one chunk.
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

// expireChunk deletes, under the gate, the candidates whose ID is still
// marked at or before cutoff, and deletes or rewrites the chunk's records.
func (s *Store) expireChunk(p *partition, cutoff uint64, cands []expiryEntry, finished [][]byte, removed []Removed) ([]Removed, error) {
	slices.SortFunc(cands, func(a, b expiryEntry) int { return strings.Compare(a.ID, b.ID) })
	pb := s.db.NewBatch()
	defer pb.Close()
	for _, k := range finished {
		if err := pb.Delete(k, nil); err != nil {
			return removed, err
		}
	}
	s.gate.Lock()
	defer s.gate.Unlock()
	if p.dropped.Load() {
		return removed, nil
	}
	lower, upper := familyBounds(p.h, familyID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return removed, ioError(err, "expire %s", p.tp)
	}
	key := make([]byte, 0, 64)
	n := len(removed)
	for i, c := range cands {
		if i > 0 && cands[i-1].ID == c.ID {
			continue
		}
		key = appendIDKey(key[:0], p.h, c.ID)
		if !it.SeekPrefixGE(key) || !bytes.Equal(it.Key(), key) {
			continue // removed already, or never committed
		}
		at, err := decodeIDValue(it.Value())
		if err != nil {
			_ = it.Close()
			return removed[:n], errorf(ErrCorrupt, err, "dir %s: partition %s: %v", s.dir, p.tp, err)
		}
		if at > cutoff {
			continue // marked again since; its newer record expires it
		}
		if err := pb.Delete(key, nil); err != nil {
			_ = it.Close()
			return removed[:n], err
		}
		removed = append(removed, Removed{TP: p.tp, ID: c.ID})
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return removed[:n], ioError(err, "expire %s", p.tp)
	}
	if err := s.db.Apply(pb, pebble.NoSync); err != nil {
		return removed[:n], ioError(err, "expire %s", p.tp)
	}
	return removed, nil
}
