package consumer

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/checkpoint"
)

// partState is the worker's view of one assigned partition: which of its
// dispatched records are complete, the results waiting for the next
// commit, and the overlay of processed IDs and state writes that are
// completed but not yet in the checkpoint.
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
	// again).
	next        int64
	leaderEpoch int32
	// inflight holds the dispatched offsets in order; done marks the
	// completed ones. The committed prefix ends at the first not done.
	inflight []int64
	done     map[int64]bool
	results  []*result

	// seq numbers results; the overlay remembers which result wrote what,
	// so a commit clears only what it made durable.
	seq     uint64
	ids     map[string]uint64
	overlay map[string]overlayVal
}

type overlayVal struct {
	value []byte // nil: deleted
	seq   uint64
}

// result is what a completed task leaves for the commit.
type result struct {
	seq     uint64
	offset  int64
	id      string
	dup     bool
	at      time.Time
	writes  []stateWrite
	outputs []*kgo.Record
}

func newPartState(tp checkpoint.TP, store *checkpoint.Store) *partState {
	return &partState{tp: tp, store: store, next: -1, done: map[int64]bool{}, ids: map[string]uint64{}, overlay: map[string]overlayVal{}}
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
	p.inflight = append(p.inflight, r.Offset)
	return p.epoch, true
}

// complete records a finished record. res is nil for a record whose work
// was dropped (a result of an older epoch is ignored altogether).
func (p *partState) complete(epoch uint64, offset int64, res *result) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch != p.epoch || p.revoked {
		return false
	}
	p.done[offset] = true
	if res == nil {
		return true
	}
	p.seq++
	res.seq = p.seq
	res.offset = offset
	if !res.dup {
		p.ids[res.id] = res.seq
		for _, w := range res.writes {
			p.overlay[string(w.key)] = overlayVal{value: w.value, seq: res.seq}
		}
	}
	p.results = append(p.results, res)
	return true
}

// processed reports whether id completed in this partition and awaits
// commit, or is in the checkpoint.
func (p *partState) processed(id string) (bool, error) {
	p.mu.Lock()
	_, ok := p.ids[id]
	p.mu.Unlock()
	if ok {
		return true, nil
	}
	return p.store.Has(p.tp, id)
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

// collect takes the results completed so far and the offset up to which
// the partition is complete, for a commit. changed is false when there is
// nothing new to commit.
func (p *partState) collect() (res []*result, commitAt kgo.EpochOffset, upTo uint64, changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := 0
	for i < len(p.inflight) && p.done[p.inflight[i]] {
		delete(p.done, p.inflight[i])
		i++
	}
	if i > 0 {
		changed = true
		commitAt = kgo.EpochOffset{Epoch: p.leaderEpoch, Offset: p.inflight[i-1] + 1}
		if i < len(p.inflight) {
			commitAt.Offset = p.inflight[i]
		}
		p.inflight = append(p.inflight[:0], p.inflight[i:]...)
	}
	res, p.results = p.results, nil
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
// rewound the partition to its committed offset.
func (p *partState) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch++
	p.next = -1
	p.inflight = p.inflight[:0]
	p.done = map[int64]bool{}
	p.results = nil
	p.ids = map[string]uint64{}
	p.overlay = map[string]overlayVal{}
	p.held = nil
}

// revoke stops the partition: nothing of it runs or commits any more.
func (p *partState) revoke() {
	p.mu.Lock()
	p.revoked = true
	p.held = nil
	p.mu.Unlock()
}

// pending counts dispatched records not yet committed.
func (p *partState) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight)
}
