package consumer

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
)

// partState is the worker's view of one assigned partition: the records it
// admitted and which of them are still open, the results waiting for the
// next commit, the order in which its records may start, and the overlay
// of processed IDs and state writes committed to Kafka's transaction soon
// but not yet in the checkpoint.
//
// Everything is guarded by mu. A revoked partition is done with: its
// results are dropped, its queued records never start.
type partState struct {
	tp    checkpoint.TP
	store *checkpoint.Store
	// recordsTopic is the queue's task records topic, named once, and
	// recordsKey the key of this partition's record batches there.
	recordsTopic string
	recordsKey   []byte
	// The queue's series of the per-task metrics, looked up once.
	inflight prometheus.Gauge
	latency  prometheus.Observer
	lag      atomic.Int64 // behind the high watermark at the last fetch

	// queueMu is held from the admission of fetched records to their
	// queueing (dispatch): the lookahead, which queues records past them
	// (lookahead.admit), never queues one ahead of an earlier record of
	// its key still on its way to the key's line.
	queueMu sync.Mutex

	mu        sync.Mutex
	revoked   bool
	restored  bool // the checkpoint has caught up with the changelog
	restoring bool // a restore is running
	held      []*item
	q         quietness

	offsets     offsetSet
	leaderEpoch int32
	committed   int64 // where the last commit moved the partition; -1 none yet
	results     []*result
	// finished are the records above the committed offset whose results
	// are committed: as of the last commit, or of the checkpoint restored.
	finished checkpoint.Ranges

	// keys orders the records that share a key or a dedup key: a key is
	// present while a record holding it is in flight, with the records
	// waiting behind it (see scheduler.submit).
	keys    map[string][]*item
	waiting int // records waiting in keys

	// ahead holds the offsets of the records the lookahead admitted above
	// the fetch position (lookahead.go): false while the run is in
	// flight, true once it finished. The fetch admits each again in its
	// turn, as a duplicate of that run, and then forgets it.
	ahead map[int64]bool
	// aheadFrom is where the lookahead stopped reading, far enough ahead:
	// it reads the partition again once the fetch gets there.
	aheadFrom int64
	// aheadStart is the group's committed offset, fetched as stable, when
	// the lookahead restored the partition before the fetch received a
	// record of it (lookahead_restore.go); -1 otherwise.
	aheadStart int64
	// aheadRunning counts its records admitted ahead and not finished, in
	// aheadOpen, the lookahead's count of them all, too.
	aheadRunning int
	aheadOpen    *atomic.Int64

	// seq numbers results; the overlay remembers which result wrote what,
	// so a commit clears only what it made durable. ids is kept only with
	// a store (exactly-once); without one, the overlay is the partition's
	// whole state, in memory until the partition is revoked.
	seq     uint64
	cleared uint64 // the last seq a checkpoint write cleared
	ids     map[string]uint64
	overlay map[string]overlayVal
}

type overlayVal struct {
	value []byte // nil: deleted
	seq   uint64
}

// result is what a finished task leaves for the commit.
type result struct {
	seq     uint64
	id      string // the dedup key of the run
	offset  int64  // of the record that ran
	idem    bool   // id is an idempotency key: the result marks it processed
	outcome string // success, duplicate, retried, dead, expired, forwarded
	noMark  bool   // leaves no mark and no state (a duplicate, a forwarded record)
	at      time.Time
	writes  []stateWrite
	outputs []*kgo.Record
	src     *kgo.Record        // the record that ran
	queue   string             // its queue, for a dead letter
	refused int                // commits that refused an output as too large
	rec     taskOutcome        // what its task record says
	emitted []onceq.TaskRecord // the pending records of the tasks it emits
	// commit is the span of a traced run's wait for its commit (nil: the
	// run was not traced), ended once the commit took the result.
	commit trace.Span
}

func newPartState(tp checkpoint.TP, store *checkpoint.Store) *partState {
	return &partState{tp: tp, store: store, recordsTopic: broker.RecordsTopic(tp.Topic),
		recordsKey: []byte(tp.Topic + "/" + strconv.Itoa(int(tp.Partition))), offsets: newOffsetSet(), committed: -1, aheadStart: -1,
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{}), latency: prometheus.NewHistogram(prometheus.HistogramOpts{}),
		keys: map[string][]*item{}, ahead: map[int64]bool{}, ids: map[string]uint64{}, overlay: map[string]overlayVal{}}
}

// admit takes, under one lock, the records of a fetch that the partition
// has not seen (below its fetch position: fetched again after a seek) and
// that are not transaction markers, and returns their items, made in one
// block. A revoked partition takes none.
func (p *partState) admit(recs []*kgo.Record) []*item {
	block := make([]item, 0, len(recs)) // never grows: its items' addresses hold
	items := make([]*item, 0, len(recs))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked {
		return nil
	}
	for _, r := range recs {
		// Transaction markers only tell how far the worker has read
		// (quiet.go).
		if r.Attrs.IsControl() || r.Offset < p.offsets.next {
			continue
		}
		p.offsets.add(r.Offset)
		p.leaderEpoch = r.LeaderEpoch
		block = append(block, item{ps: p, rec: r})
		items = append(items, &block[len(block)-1])
	}
	return items
}

// complete records a finished record's result and returns the records that
// may start now that it let go of its keys. A nil result (the run was
// canceled at shutdown) leaves the record open, so no commit passes it.
// The results of a revoked partition are dropped.
func (p *partState) complete(it *item, res *result) (ready []*item) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if it.ahead && !p.revoked {
		p.aheadRunning--
		p.aheadOpen.Add(-1)
	}
	if p.revoked || res == nil {
		return nil
	}
	if it.ahead {
		p.ahead[it.rec.Offset] = true // not admitted by the fetch yet: nothing to close
	} else {
		p.offsets.done(it.rec.Offset)
		delete(p.ahead, it.rec.Offset)
	}
	p.seq++
	res.seq, res.offset = p.seq, it.rec.Offset
	res.idem = it.idem && res.id == it.dedupKey
	if !res.noMark {
		// Without a checkpoint (at-least-once) nothing deduplicates
		// and no commit clears ids: keeping them would hold every
		// task ID the partition ever ran.
		if p.store != nil && res.idem {
			p.ids[res.id] = res.seq
		}
		for _, w := range res.writes {
			p.overlay[string(w.key)] = overlayVal{value: w.value, seq: res.seq}
		}
	}
	p.results = append(p.results, res)
	settle := p.store != nil && res.idem && !res.noMark
	for _, k := range it.keys[:it.nkeys] {
		waiters := p.keys[k]
		if settle && k == res.id {
			settled(waiters, k)
		}
		if len(waiters) == 0 {
			delete(p.keys, k)
			continue
		}
		next := waiters[0]
		p.keys[k] = waiters[1:]
		p.waiting--
		if next.waits--; next.waits == 0 {
			ready = append(ready, next)
		}
	}
	return ready
}

// retract removes a result's state writes from the overlay, where they
// were visible to other tasks: the result is committed without them.
func (p *partState) retract(res *result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range res.writes {
		if v, ok := p.overlay[string(w.key)]; ok && v.seq == res.seq {
			delete(p.overlay, string(w.key))
		}
	}
	res.writes = nil
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

// collect takes the results finished so far and the offset the commit may
// move the partition to: its first open record, so that the commit never
// passes an unfinished one. moved is false when the offset stays.
func (p *partState) collect() (res []*result, to kgo.EpochOffset, moved bool, upTo uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.restored {
		// Its records are held, and what it finished before lies in
		// the changelog the restore is reading: nothing to commit yet.
		return nil, kgo.EpochOffset{Offset: -1}, false, p.seq
	}
	res, p.results = p.results, nil
	at := p.offsets.prefix()
	moved = at >= 0 && at > p.committed
	return res, kgo.EpochOffset{Epoch: p.leaderEpoch, Offset: at}, moved, p.seq
}

// notStartedLocked reports whether the fetch has received nothing of the
// partition and the lookahead has not started it: not restored ahead
// (exactly once), or given no start (at least once, where the partition
// is restored from its assignment on). p.mu is held.
func (p *partState) notStartedLocked() bool {
	return !p.revoked && !p.restoring && p.offsets.next < 0 && p.aheadStart < 0
}

// unfetched reports whether the lookahead restored the partition and its
// fetch has received nothing of it yet (partState.aheadStart).
func (p *partState) unfetched() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.aheadStart >= 0 && p.offsets.next < 0
}

// finishedAfter returns the records finished above to once res commits
// with the partition at to, and whether that differs from what the last
// commit recorded.
func (p *partState) finishedAfter(res []*result, to int64) (checkpoint.Ranges, bool) {
	offs := make([]int64, 0, len(res))
	for _, r := range res {
		if r.offset >= to {
			offs = append(offs, r.offset)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(offs) == 0 && (len(p.finished) == 0 || p.finished[0].From >= to) {
		return p.finished, false
	}
	fin := p.finished.Merge(offs, to)
	return fin, !slices.Equal(fin, p.finished)
}

// committedTo records where a successful commit moved the partition and,
// if it wrote them (newFin), the records above that it finished.
func (p *partState) committedTo(at int64, finished checkpoint.Ranges, newFin bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.committed = max(p.committed, at)
	if newFin {
		p.finished = finished
	}
}

// putBack returns the results of an aborted commit: they are still
// finished, and the next commit takes them, ahead of those finished since.
// Their outputs are produced again, as new records.
func (p *partState) putBack(res []*result) {
	if len(res) == 0 {
		return
	}
	for _, r := range res {
		for i, o := range r.outputs {
			r.outputs[i] = &kgo.Record{Topic: o.Topic, Key: o.Key, Value: o.Value, Headers: o.Headers}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.results = append(res, p.results...)
}

// checkpointed clears the overlay entries that a checkpoint write made
// durable.
func (p *partState) checkpointed(upTo uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleared = max(p.cleared, upTo)
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

// progress is the partition's open records and the finished ones above
// its committed offset, for the metrics.
func (p *partState) progress() (open, finishedAbove int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.offsets.openCount(), p.offsets.finishedAbove()
}

// revoke stops the partition: nothing of it starts or commits any more.
// It returns how many admitted records it dropped before they started.
func (p *partState) revoke() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.revoked = true
	if p.aheadRunning > 0 {
		p.aheadOpen.Add(-int64(p.aheadRunning))
		p.aheadRunning = 0
	}
	n := len(p.held) + p.waiting
	p.held, p.keys, p.waiting, p.ahead = nil, nil, 0, nil
	return n
}

// stale reports whether the item's partition was revoked.
func (it *item) stale() bool { return it.ps.isRevoked() }

func (p *partState) isRevoked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.revoked
}
