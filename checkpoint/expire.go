package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// expireChunk is how many IDs ExpireProcessed examines and deletes in one
// write.
const expireChunk = 1024

// Why expiry never stalls commits, yet never deletes a fresh mark: a chunk
// reads IDs' times, finds them old, and deletes the IDs. A commit that marks
// one of them again between the read and the delete would lose its mark.
// (The worker never does that, it only marks IDs that Has reported absent,
// but a restore may, and Batch allows it.) So every commit registers the IDs
// it marks in s.watch while it applies, and every chunk collects the marks
// of the commits that were in flight when it started reading or that began
// before it deletes. It skips those IDs, holding s.watch.mu from the check
// through its write: a commit that registers later applies after the delete
// and so wins. Nothing waits on anything but that short critical section.
type watch struct {
	mu       sync.Mutex
	next     uint64
	inflight map[uint64]map[handle][]expiryEntry // commits applying now
	chunks   map[*chunkWatch]struct{}            // chunks between read and delete
}

// A chunkWatch collects the marks of the commits that may have applied
// since its chunk started reading.
type chunkWatch struct {
	marks []map[handle][]expiryEntry
}

// begin registers a commit's marks; call end with the result when the
// commit is applied.
func (w *watch) begin(marks map[handle][]expiryEntry) uint64 {
	if len(marks) == 0 {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	w.inflight[w.next] = marks
	for c := range w.chunks {
		c.marks = append(c.marks, marks)
	}
	return w.next
}

func (w *watch) end(seq uint64) {
	if seq == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.inflight, seq)
}

func newWatch() *watch {
	return &watch{inflight: map[uint64]map[handle][]expiryEntry{}, chunks: map[*chunkWatch]struct{}{}}
}

// startChunk is called before a chunk reads; endChunk when it is done.
func (w *watch) startChunk() *chunkWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &chunkWatch{}
	for _, m := range w.inflight {
		c.marks = append(c.marks, m)
	}
	w.chunks[c] = struct{}{}
	return c
}

func (w *watch) endChunk(c *chunkWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.chunks, c)
}

// remarked returns the IDs of partition h marked since the chunk started;
// the caller holds w.mu and removes the chunk when done.
func (c *chunkWatch) remarked(h handle) map[string]struct{} {
	var ids map[string]struct{}
	for _, m := range c.marks {
		for _, e := range m[h] {
			if ids == nil {
				ids = map[string]struct{}{}
			}
			ids[e.ID] = struct{}{}
		}
	}
	return ids
}

// Removed is what ExpireProcessed removed from a partition: a mark record
// whose IDs are all gone, or one processed ID that has a changelog record
// of its own (a KindMark, or an ID kept alive past its first record).
type Removed struct {
	TP TP
	// ID is the processed ID removed; empty for a mark record.
	ID string
	// Tombstone is the key of the changelog tombstone that removes it.
	Tombstone []byte
}

// ExpireProcessed removes the processed IDs marked at or before now minus
// the dedup window, and returns what it removed so that the caller can
// write the changelog tombstones. It is Expire for a caller that writes
// the tombstones itself, between its commits.
//
// A batch that marks an ID again while ExpireProcessed removes it keeps its
// mark, and the ID is not returned; but an ID marked again after
// ExpireProcessed removed it is returned and present. So write the
// tombstones of the returned IDs before the changelog records of later
// marks (in the next transaction, before its marks), or run ExpireProcessed
// between commits.
func (s *Store) ExpireProcessed(ctx context.Context, now time.Time, limit int) ([]Removed, error) {
	var removed []Removed
	_, err := s.Expire(ctx, now, limit, func(r []Removed) { removed = append(removed, r...) })
	return removed, err
}

// Expire removes the processed IDs marked at or before now minus the dedup
// window, deleting at most limit IDs (limit <= 0: no limit), so that one
// call's work stays bounded, and returns how many it deleted. It works in
// chunks of about a thousand IDs, resting between them, and never blocks
// commits.
//
// Each chunk hands what it removes to tombstones before it deletes
// anything, so that the caller can write the changelog tombstones: one per
// mark record once it is due (a bare one, as MarkRecord writes them, before
// the scan that deletes its IDs by their own times; one that lists its IDs,
// when a chunk takes the last of them, so that a call that stops inside it
// hands it over in a later call), one per ID that has a record of its own.
// The scan of the IDs examines a bounded number of keys a call when there
// is a limit, so an ID may outlive its window by a few calls.
// Handing over first lets Expire run beside the caller's commits: a task
// that runs because its ID is gone is admitted after the deletion, so the
// commit that marks the ID again finds the tombstone already handed over,
// and must write it first. tombstones runs under a lock that commits also
// take: it must be quick and must not call the Store.
//
// A batch that marks an ID again while Expire removes it keeps its mark,
// and the ID is not handed over. An ID marked again after its first mark
// is kept until its latest mark expires. The removal is not synced: after
// a crash some removed IDs may be back, and a later call removes (and
// hands over) them again; a chunk whose deletion fails has handed over
// tombstones of IDs still there, which costs the changelog nothing but
// their records.
func (s *Store) Expire(ctx context.Context, now time.Time, limit int, tombstones func([]Removed)) (int, error) {
	if err := s.acquire(); err != nil {
		return 0, err
	}
	defer s.release()
	if s.cfg.readOnly {
		return 0, invalidf("store %s is open read-only", s.dir)
	}
	s.expireMu.Lock()
	defer s.expireMu.Unlock()
	if limit <= 0 {
		limit = int(^uint(0) >> 1)
	}
	cutoff := millis(now.Add(-s.cfg.dedupWindow))
	// Start where the last call stopped, so that a partition with a long
	// backlog does not starve the others.
	var ps []*partition
	for _, p := range s.parts.Load().byHandle {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *partition) int { return int(a.h) - int(b.h) })
	start := handle(s.expireNext.Load())
	i, _ := slices.BinarySearchFunc(ps, start, func(p *partition, h handle) int { return int(p.h) - int(h) })
	ps = slices.Concat(ps[i:], ps[:i])

	deleted, budget := 0, expireScanKeys
	if limit == int(^uint(0)>>1) {
		budget = limit
	}
	for _, p := range ps {
		if err := s.expirePartition(ctx, p, cutoff, limit, &deleted, &budget, tombstones); err != nil {
			return deleted, err
		}
		if deleted >= limit || budget <= 0 {
			s.expireNext.Store(uint32(p.h))
			return deleted, nil
		}
	}
	s.expireNext.Store(0)
	return deleted, nil
}

// expirePartition removes p's expired IDs, handing what it removes to
// tombstones, until *deleted reaches limit.
//
// An expiry record is deleted by the chunk that takes its last ID. When the
// call stops inside a record, the record stays whole: the next call examines
// its IDs again and skips those already removed.
func (s *Store) expirePartition(ctx context.Context, p *partition, cutoff uint64, limit int, deleted, budget *int, tombstones func([]Removed)) error {
	lower, _ := familyBounds(p.h, familyExpiry)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: expiryUpper(p.h, cutoff)})
	if err != nil {
		return ioError(err, "expire %s", p.tp)
	}
	defer it.Close()
	var (
		cands    []expiryEntry
		finished []expiryRecord // the records the chunk takes the last IDs of
		pending  []expiryEntry  // IDs of the current record not yet taken
		current  expiryRecord
		ok       = it.First()
	)
	for *deleted < limit {
		if err := ctx.Err(); err != nil {
			return err
		}
		cands, finished = cands[:0], finished[:0]
		room := min(expireChunk, limit-*deleted)
		for len(cands) < room && len(finished) < expireChunk {
			if len(pending) == 0 {
				if !ok {
					break
				}
				k, err := decodeKey(it.Key())
				logged := err == nil && isLogged(k.sum, it.Value())
				if err == nil && len(it.Value()) == 0 {
					p.walkedUntil = max(p.walkedUntil, k.at) // its IDs are for the scan
				}
				if err == nil {
					err = decodeExpiryRecord(k.at, it.Value(), func(e expiryEntry) {
						e.logged = logged
						pending = append(pending, e)
					})
				}
				if err != nil {
					return errorf(ErrCorrupt, err, "dir %s: partition %s: %v", s.dir, p.tp, err)
				}
				current = expiryRecord{key: bytes.Clone(it.Key()), at: k.at, sum: k.sum, logged: logged}
				ok = it.Next()
			}
			n := min(len(pending), room-len(cands))
			cands = append(cands, pending[:n]...)
			if pending = pending[n:]; len(pending) == 0 {
				finished = append(finished, current)
			}
		}
		if len(cands) == 0 && len(finished) == 0 {
			break
		}
		if err := s.restChunk(p, cutoff, cands, finished, true, deleted, tombstones); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return ioError(err, "expire %s", p.tp)
	}
	if *deleted >= limit || ok || len(pending) > 0 {
		return nil // records left: the scan waits for them
	}
	return s.expireScan(ctx, p, cutoff, limit, deleted, budget, tombstones)
}

// restChunk runs expireChunk and then rests as long as it took: expiry is
// background work, and the compactions its deletions cause compete with
// commits for the disk. This halves its peak load.
func (s *Store) restChunk(p *partition, cutoff uint64, cands []expiryEntry, finished []expiryRecord, rewrite bool, deleted *int, tombstones func([]Removed)) error {
	start := time.Now()
	n, err := s.expireChunk(p, cutoff, cands, finished, rewrite, tombstones)
	if err != nil {
		return err
	}
	*deleted += n
	time.Sleep(time.Since(start))
	return nil
}

// expireScanKeys bounds the ID keys one call of Expire with a limit
// examines, over all partitions; the next call goes on where it stopped. A
// worker calls Expire every minute or so, so a store of a million IDs is
// scanned through in about four minutes, at some thousands of keys a
// second whatever its size. A variable for the tests.
var expireScanKeys = 1 << 18

// expireScan deletes, in chunks, p's IDs whose own time is at or before
// cutoff less recordSpan: those of bare mark records (MarkRecord), which
// list no IDs. It runs after the walk of the expiry records due at cutoff,
// so each such ID's record (at most recordSpan later than the ID's time)
// is already handed over for its changelog tombstone before the ID goes,
// as Expire promises. It examines at most *budget keys, less them from
// it.
//
// The scan goes through the IDs in rounds, from the first key to the
// last, each call going on where the last one stopped. A round runs only
// while the walk has taken a bare record that no whole round has covered
// since, so a call with nothing due reads no ID keys; a call that ends a
// round may start the next.
func (s *Store) expireScan(ctx context.Context, p *partition, cutoff uint64, limit int, deleted, budget *int, tombstones func([]Removed)) error {
	if cutoff < recordSpan {
		return nil
	}
	if !p.walkedKnown {
		// A walk before the store opened may have taken records whose
		// IDs are still here: those are at or before this cutoff.
		p.walkedKnown, p.walkedUntil = true, max(p.walkedUntil, cutoff)
	}
	cutoff -= recordSpan
	started := false
	for *budget > 0 && *deleted < limit {
		if !p.scanning {
			if started || p.walkedUntil <= p.scanCovered {
				return nil // nothing due, or this call's round is through
			}
			p.scanning, p.scanStart, p.scanFrom, started = true, cutoff, nil, true
		}
		through, err := s.scanRound(ctx, p, cutoff, limit, deleted, budget, tombstones)
		if err != nil || !through {
			return err
		}
		// Every ID at or before the round's first cutoff is gone.
		p.scanning, p.scanCovered, p.scanFrom = false, p.scanStart, nil
	}
	return nil
}

// scanRound goes on with p's round of the scan from p.scanFrom, deleting
// the IDs at or before cutoff, until the last key (it reports through) or
// the budget or limit is spent (p.scanFrom is then where the next call
// goes on).
func (s *Store) scanRound(ctx context.Context, p *partition, cutoff uint64, limit int, deleted, budget *int, tombstones func([]Removed)) (through bool, err error) {
	lower, upper := familyBounds(p.h, familyID)
	if p.scanFrom != nil {
		lower = p.scanFrom
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return false, ioError(err, "expire %s", p.tp)
	}
	defer it.Close()
	var cands []expiryEntry
	ok := it.First()
	for ; ok && *budget > 0 && *deleted < limit; ok = it.Next() {
		*budget--
		s.expireScanned++
		at, err := decodeIDValue(it.Value())
		if err != nil {
			return false, errorf(ErrCorrupt, err, "dir %s: partition %s: %v", s.dir, p.tp, err)
		}
		if at <= cutoff {
			// logged: its record, not the ID, has the changelog tombstone.
			cands = append(cands, expiryEntry{ID: string(it.Key()[handleLen+1:]), At: at, logged: true})
		}
		if len(cands) < min(expireChunk, limit-*deleted) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if err := s.restChunk(p, cutoff, cands, nil, false, deleted, tombstones); err != nil {
			return false, err
		}
		cands = cands[:0]
	}
	if err := it.Error(); err != nil {
		return false, ioError(err, "expire %s", p.tp)
	}
	if ok {
		p.scanFrom = slices.Clone(it.Key())
	}
	if len(cands) > 0 {
		if err := s.restChunk(p, cutoff, cands, nil, false, deleted, tombstones); err != nil {
			return false, err
		}
	}
	return !ok, nil
}

// expiryRecord is an expiry record a chunk finishes.
type expiryRecord struct {
	key     []byte
	at, sum uint64
	logged  bool // a mark record the changelog holds
}

// expireChunk deletes the candidates whose ID is still marked at or before
// cutoff, and the records the chunk finished; it returns how many IDs it
// deleted. A candidate marked again meanwhile stays, and with rewrite gets
// a record of its own in place of the one the chunk deletes.
func (s *Store) expireChunk(p *partition, cutoff uint64, cands []expiryEntry, finished []expiryRecord, rewrite bool, tombstones func([]Removed)) (int, error) {
	slices.SortFunc(cands, func(a, b expiryEntry) int { return strings.Compare(a.ID, b.ID) })
	w := s.watch.startChunk()
	defer s.watch.endChunk(w)
	lower, upper := familyBounds(p.h, familyID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, ioError(err, "expire %s", p.tp)
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
		// The IDs are sorted and nearly all there: plain seeks, which
		// step forward from the last one, beat bloom-filtered ones.
		key := appendIDKey(nil, p.h, c.ID)
		if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
			continue // removed already, or never committed
		}
		at, err := decodeIDValue(it.Value())
		if err != nil {
			_ = it.Close()
			return 0, errorf(ErrCorrupt, err, "dir %s: partition %s: %v", s.dir, p.tp, err)
		}
		if at <= cutoff { // else marked again since: its newer record expires it
			dues = append(dues, due{key, c})
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return 0, ioError(err, "expire %s", p.tp)
	}

	pb := s.db.NewBatch()
	defer pb.Close()
	for _, r := range finished {
		if err := pb.Delete(r.key, nil); err != nil {
			return 0, err
		}
	}
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	if p.dropped.Load() {
		return 0, nil
	}
	var removed []Removed
	deleted := 0
	var kept []expiryEntry
	remarked := w.remarked(p.h)
	for _, d := range dues {
		if _, ok := remarked[d.e.ID]; ok {
			// Marked again while we looked, maybe with an old time: keep
			// it, in a new record, as the chunk deletes the old one (a
			// scan finds it again by its time).
			if rewrite {
				kept = append(kept, d.e)
			}
			continue
		}
		if err := pb.Delete(d.key, nil); err != nil {
			return 0, err
		}
		deleted++
		if !d.e.logged {
			removed = append(removed, Removed{TP: p.tp, ID: d.e.ID, Tombstone: EncodeMarkTombstone(d.e.ID)})
		}
	}
	// A mark record goes from the changelog whole, even if some of its IDs
	// were marked again: their later records hold them.
	for _, r := range finished {
		if r.logged {
			removed = append(removed, Removed{TP: p.tp, Tombstone: changelogKey(KindMarks, markRecordKey(r.at, r.sum))})
		}
	}
	if err := writeExpiryRecords(pb, p.h, kept); err != nil {
		return 0, err
	}
	if len(removed) > 0 {
		tombstones(removed)
	}
	if err := s.apply(pb, pebble.NoSync); err != nil {
		return 0, ioError(err, "expire %s", p.tp)
	}
	return deleted, nil
}
