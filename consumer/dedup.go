package consumer

import "github.com/onceq/onceq"

// The dedup decision has one owner, partState.duplicate, and one helper
// that prepares it in bulk, partState.lookup.
//
// A key is processed if a result for it finished in this partition: until
// the checkpoint write of its commit lands it is in ids, and from then on
// in the checkpoint; checkpointed clears ids only after the write, so a
// reader that looks at ids first and the store second never misses it.
// Records of one dedup key run one at a time (the scheduler orders them),
// so a duplicate asks only after the record it duplicates finished.

// lookup asks the checkpoint, in one batch, which of the items' dedup keys
// are processed, when they are admitted. The answer stands as long as no
// checkpoint write cleared from ids a result that finished after it: until
// then a result for the key finished since would still be in ids.
func (p *partState) lookup(items []*item) error {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = onceq.DedupKeyOf(it.rec)
		it.dedupKey = keys[i] // the scheduler orders by it even if the lookup fails
	}
	if p.store == nil || len(items) == 0 {
		return nil
	}
	// ids before the checkpoint: see above.
	pending := make([]bool, len(items))
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
	for i, it := range items {
		it.known, it.looked, it.lookSeq = found[i] || pending[i], true, seq
	}
	return nil
}

// duplicate reports whether key is processed in this partition, as the
// record it is about to start sees it.
func (p *partState) duplicate(it *item, key string) (bool, error) {
	p.mu.Lock()
	_, ok := p.ids[key]
	stands := it.looked && it.dedupKey == key && p.cleared <= it.lookSeq
	p.mu.Unlock()
	if ok {
		return true, nil
	}
	if stands {
		return it.known, nil
	}
	return p.store.Has(p.tp, key)
}
