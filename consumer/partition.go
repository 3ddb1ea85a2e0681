package consumer

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/checkpoint"
)

// partState is the worker's view of one assigned partition: how far it
// dispatched, the results waiting for the next commit, and the overlay of
// processed IDs and state writes that are committed to Kafka's transaction
// soon but not yet in the checkpoint.
//
// Everything is guarded by mu. The epoch changes whenever in-flight work
// of the partition must be thrown away (an aborted commit, a revocation):
// a result carrying an older epoch is dropped.
type partState struct {
	tp    checkpoint.TP
	store *checkpoint.Store

	mu       sync.Mutex
	epoch    uint64
	revoked  bool
	restored bool // the checkpoint has caught up with the changelog
	restorer bool // a restore is running
	held     []*item

	// next is the offset after the last dispatched record: records below
	// it in this epoch were dispatched already (a re-seek may fetch them
	// again). committed is next as of the last commit.
	next        int64
	committedAt int64
	leaderEpoch int32
	results     []*result

	// seq numbers results; the overlay remembers which result wrote what,
	// so a commit clears only what it made durable. ids is kept only with
	// a store (exactly-once); without one, the overlay is the partition's
	// whole state, in memory until the partition is revoked or reset.
	seq     uint64
	ids     map[string]uint64
	overlay map[string]overlayVal

	// routes is the lane of each dedup key dispatched since the last
	// commit (see lanes.submit).
	routes map[string]int
}

type overlayVal struct {
	value []byte // nil: deleted
	seq   uint64
}

// result is what a completed task leaves for the commit.
type result struct {
	seq     uint64
	id      string // the dedup key the result marks processed
	outcome string // success, duplicate, retried, dead, expired
	dup     bool
	at      time.Time
	writes  []stateWrite
	outputs []*kgo.Record
}

func newPartState(tp checkpoint.TP, store *checkpoint.Store) *partState {
	return &partState{tp: tp, store: store, next: -1, committedAt: -1, ids: map[string]uint64{}, overlay: map[string]overlayVal{},
		routes: map[string]int{}}
}

// admit records a fetched record as dispatched, unless it was already.
func (p *partState) admit(r *kgo.Record) (epoch uint64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked || r.Offset < p.next {
		return 0, false
	}
	p.next = r.Offset + 1
	p.leaderEpoch = r.LeaderEpoch
	return p.epoch, true
}

// complete records finished records' results; those of an older epoch
// are dropped. dropped reports a nil result (work dropped unrun) for a
// record of the current epoch.
func (p *partState) complete(done []finished) (dropped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range done {
		stale := d.it.epoch != p.epoch || p.revoked
		if d.res == nil {
			dropped = dropped || !stale
			continue
		}
		if stale {
			continue
		}
		res := d.res
		p.seq++
		res.seq = p.seq
		if !res.dup {
			// Without a checkpoint (at-least-once) nothing deduplicates
			// and no commit clears ids: keeping them would hold every
			// task ID the partition ever ran.
			if p.store != nil {
				p.ids[res.id] = res.seq
			}
			for _, w := range res.writes {
				p.overlay[string(w.key)] = overlayVal{value: w.value, seq: res.seq}
			}
		}
		p.results = append(p.results, res)
	}
	return dropped
}

// processed reports whether key completed in this partition and awaits
// commit, or is in the checkpoint (as looked up when it was dispatched).
func (p *partState) processed(key string, it *item) (bool, error) {
	p.mu.Lock()
	_, ok := p.ids[key]
	p.mu.Unlock()
	if ok {
		return true, nil
	}
	if it.looked && it.knownKey == key {
		return it.known, nil
	}
	return p.store.Has(p.tp, key)
}

// lookup asks the checkpoint, in one batch, which of the items' dedup keys
// are processed.
func (p *partState) lookup(items []*item) error {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = onceq.DedupKeyOf(it.rec)
		it.knownKey = keys[i] // the lanes route by it even if the lookup fails
	}
	if p.store == nil || len(items) == 0 {
		return nil
	}
	// The overlay is read before the checkpoint. It then holds every key
	// of the earlier commits whose checkpoint write is still in flight
	// (they all completed before these records were dispatched), and a
	// write that lands later is seen by HasMany; a key in neither is not
	// processed, and can only become so in this commit cycle, in ids.
	pending := make([]bool, len(items))
	p.mu.Lock()
	for i, k := range keys {
		_, pending[i] = p.ids[k]
	}
	p.mu.Unlock()
	found, err := p.store.HasMany(p.tp, keys)
	if err != nil {
		return err
	}
	for i, it := range items {
		it.known, it.looked = found[i] || pending[i], true
	}
	return nil
}

// overlayGet looks key up among the completed, uncommitted writes.
func (p *partState) overlayGet(key []byte) (value []byte, ok, found bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, found := p.overlay[string(key)]
	if !found {
		return nil, false, false
	}
	return v.value, v.value != nil, true
}

// collect takes the results completed so far and the offset the commit
// moves the partition to (everything dispatched: the commit barrier has
// waited for all of it). changed is false when there is nothing to commit.
func (p *partState) collect() (res []*result, commitAt kgo.EpochOffset, upTo uint64, changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next > p.committedAt {
		commitAt = kgo.EpochOffset{Epoch: p.leaderEpoch, Offset: p.next}
		p.committedAt = p.next
		changed = true
	}
	res, p.results = p.results, nil
	clear(p.routes) // the commit barrier: nothing is in flight
	return res, commitAt, p.seq, changed || len(res) > 0
}

// committed clears the overlay entries that a commit made durable.
func (p *partState) committed(upTo uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, s := range p.ids {
		if s <= upTo {
			delete(p.ids, id)
		}
	}
	for k, v := range p.overlay {
		if v.seq <= upTo {
			delete(p.overlay, k)
		}
	}
}

// reset throws away all in-flight and uncommitted work: the session has
// rewound the partition to its committed offset. It returns how many held
// records it dropped.
func (p *partState) reset() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch++
	p.next = -1
	p.committedAt = -1
	p.results = nil
	p.ids = map[string]uint64{}
	p.overlay = map[string]overlayVal{}
	p.routes = map[string]int{}
	n := len(p.held)
	p.held = nil
	return n
}

// revoke stops the partition: nothing of it runs or commits any more. It
// returns how many held records it dropped.
func (p *partState) revoke() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.revoked = true
	n := len(p.held)
	p.held = nil
	return n
}
