package consumer

import "github.com/onceq/onceq"

// The dedup decision has one owner, partState.duplicate, and one helper
// that prepares it in bulk, partState.lookup.
//
// Two things make a record already processed. Its offset may be among the
// partition's records finished above its committed offset, whose results
// a previous commit already made durable (finished.go): that covers every
// record, whatever its ID. And its dedup key may be an idempotency key
// (onceq.Task.IdempotencyKey: an ID a client chose) that a run committed
// within the dedup window. Only idempotency keys are looked up and marked:
// the other records reach the queue once by construction.
//
// A key is processed if a result for it finished in this partition: until
// the checkpoint write of its commit lands it is in ids, and from then on
// in the checkpoint; checkpointed clears ids only after the write, so a
// reader that looks at ids first and the store second never misses it.
// Records of one dedup key run one at a time (the scheduler orders them),
// so a duplicate asks only after the record it duplicates finished.

// lookup asks the checkpoint, in one batch, which of the items' dedup keys
// are processed, when they are admitted. A result for the key can finish
// after that only for a twin that was running then: refresh catches one
// that finished before the item was queued, settled one the item queued
// behind. Otherwise the answer stands until the item starts.
func (p *partState) lookup(items []*item) error {
	var (
		keys []string
		idem []*item
	)
	for _, it := range items {
		// The scheduler orders by the key even if the lookup fails.
		it.dedupKey, it.idem = onceq.DedupKeyOf(it.rec)
		if it.idem {
			if keys == nil {
				keys, idem = make([]string, 0, len(items)), make([]*item, 0, len(items))
			}
			keys = append(keys, it.dedupKey)
			idem = append(idem, it)
		}
	}
	if p.store == nil || len(idem) == 0 {
		return nil
	}
	// ids before the checkpoint: see above.
	pending := make([]bool, len(idem))
	p.mu.Lock()
	for i, k := range keys {
		_, pending[i] = p.ids[k]
	}
	seq := p.seq
	p.mu.Unlock()
	found, err := p.store.HasMany(p.tp, keys)
	if err != nil {
		return err
	}
	for i, it := range idem {
		it.known, it.looked, it.lookSeq = found[i] || pending[i], true, seq
	}
	return nil
}

// refresh brings an item's admission-time answer up to the moment it is
// queued; the caller holds p.mu. A twin that finished since the lookup
// left its key in ids, where it stays until a checkpoint write clears it;
// if one did clear something since, the answer is asked again when the
// item starts (the restore queues held records on its own goroutine, while
// commits go on).
func (p *partState) refresh(it *item) {
	if !it.idem || !it.looked || it.known {
		return
	}
	if s, ok := p.ids[it.dedupKey]; ok && s > it.lookSeq {
		it.known = true
	} else if p.cleared > it.lookSeq {
		it.looked = false
	}
}

// settled tells the items waiting behind a finished run, for its key, that
// the key is processed: they were admitted while it ran, so their answers
// predate it. The caller holds p.mu.
func settled(waiters []*item, key string) {
	for _, w := range waiters {
		if w.idem && w.dedupKey == key {
			w.known = true
		}
	}
}

// ranAheadLocked reports whether it is the fetch's turn of a record the
// lookahead ran ahead of it (partState.ahead); p.mu is held.
func (p *partState) ranAheadLocked(it *item) bool {
	return !it.ahead && p.ahead[it.rec.Offset]
}

// ranAhead is ranAheadLocked, taking p.mu.
func (p *partState) ranAhead(it *item) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ranAheadLocked(it)
}

// duplicate reports whether the record is processed in this partition,
// as it sees it about to start: key is its dedup key and idem whether that
// is an idempotency key.
func (p *partState) duplicate(it *item, key string, idem bool) (bool, error) {
	p.mu.Lock()
	if p.finished.Contains(it.rec.Offset) || p.ranAheadLocked(it) {
		// Finished above the committed offset: by a commit, or by a run
		// ahead of the fetch (lookahead.go) whose commit may be to come.
		p.mu.Unlock()
		return true, nil
	}
	if !idem {
		p.mu.Unlock()
		return false, nil
	}
	if it.looked && it.dedupKey == key {
		// The admission-time answer, kept current by refresh and
		// settled.
		known := it.known
		p.mu.Unlock()
		return known, nil
	}
	_, ok := p.ids[key]
	p.mu.Unlock()
	if ok {
		return true, nil
	}
	return p.store.Has(p.tp, key)
}
