package consumer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
)

// errCheckpoint marks a failed checkpoint write: the worker stops, since
// its store can no longer be trusted to take more (the changelog replays
// what it missed on the next start).
var errCheckpoint = errors.New("consumer: checkpoint write failed")

// Expiry's pace: a pass deletes at most expirePass IDs; the next starts at
// once while there is a backlog, and otherwise after expireIdle (a quarter
// of the dedup window if that is shorter).
const (
	expirePass = 100_000
	expireIdle = time.Minute
)

// pending is one partition's share of a commit.
type pending struct {
	ps       *partState
	results  []*result
	to       kgo.EpochOffset // the partition's first open record
	moved    bool            // to is past the last committed offset
	finished checkpoint.Ranges
	newFin   bool // finished differs from the last commit's
	upTo     uint64
	logStart int // index of the partition's first changelog record in recs
	logEnd   int
	marks    []checkpoint.Entry // the idempotency keys marked, as mark records
}

// commit runs the commit cycle: one Kafka transaction with the finished
// tasks' outputs, their changelog records and, per partition, the offset
// of its first open record; then, if it committed, one synced Pebble batch
// with the same marks, state and offsets. It never waits for a running
// task: the offset stops below it, and the records finished above it are
// listed with the offsets (checkpoint.Ranges), in the changelog and the
// checkpoint, so a restart or the partition's next owner acknowledges them
// without running them.
//
// A crash before the transaction commits aborts it and the records run
// again. A crash between the two steps leaves the checkpoint behind the
// changelog, and the next restore replays the difference. An aborted
// transaction (a rebalance, a refused write) leaves the results finished
// and uncommitted: the next commit takes them, unless their partition was
// revoked, in which case its next owner runs them.
func (w *Worker) commit(ctx context.Context) error {
	// The checkpoint writes of earlier commits run on behind this one's
	// transaction (ckptWriter), one of them at most besides the last: a
	// commit never waits for the last commit's synced write.
	if err := w.ckpt.waitBehind(); err != nil {
		return fmt.Errorf("%w: %w", errCheckpoint, err)
	}
	// Only a finished task (counted in completed, after its result is in
	// its partition) or an expiry's tombstones give a commit something to
	// do once the last one found nothing: a worker over thousands of idle
	// partitions skips looking at each of them every commit interval.
	if w.nothingToCommit && w.completed.Load() == 0 && !w.hasTombstones() && !w.runningDue.Load() {
		return nil
	}
	w.nothingToCommit = false
	tx := w.gather()
	if len(tx.recs) == 0 && len(tx.offsets) == 0 {
		w.nothingToCommit = !tx.deferred
		return nil
	}
	tx.recs = broker.AppendWakeUps(tx.recs)
	// A transaction that moves no offset (its tasks finished above their
	// partitions' first unfinished record) commits one partition's offset
	// again, unchanged. Without an offset commit kgo's session takes the
	// brokers for pre-KIP-447 ones and holds the next commit for 500 ms
	// (GroupTransactSession.End); the commit also fences it by the
	// group's generation, as every other commit is.
	keptOnly := tx.eos && len(tx.offsets) == 0 && tx.keep.Offset >= 0
	if keptOnly {
		tx.offsets[tx.keepPS.tp.Topic] = map[int32]kgo.EpochOffset{tx.keepPS.tp.Partition: tx.keep}
	}

	w.hook(BeforeKafkaCommit)
	start := time.Now()
	// The states the transaction covers: a commit that finds one of their
	// partitions given away releases those states, and no other.
	sources := make([]*partState, len(tx.parts), len(tx.parts)+1)
	for i, p := range tx.parts {
		sources[i] = p.ps
	}
	if keptOnly && !slices.Contains(sources, tx.keepPS) {
		sources = append(sources, tx.keepPS)
	}
	committed, refused, err := w.kafka.commit(ctx, tx.recs, tx.offsets, sources)
	w.metrics.commit.WithLabelValues("kafka").Observe(time.Since(start).Seconds())
	w.markRunning(tx.running, err == nil && committed)
	if err != nil {
		return fmt.Errorf("consumer: committing: %w", err)
	}
	w.endCommit(tx, committed, refused)
	return nil
}

// txn is what one commit writes, as gather builds it.
type txn struct {
	eos     bool
	recs    []*kgo.Record
	parts   []pending
	offsets map[string]map[int32]kgo.EpochOffset
	// An offset the transaction may commit again unchanged when no
	// partition moved (see commit).
	keepPS   *partState
	keep     kgo.EpochOffset
	deferred bool          // a partition's results wait for a later commit
	running  []*handlerRun // the runs whose running records it writes
}

// gather takes each partition's finished results and builds the
// transaction of a commit: their outputs, changelog records, task records
// and offsets, the running records due, and expiry's tombstones.
func (w *Worker) gather() *txn {
	// The partitions whose runs may get running records (running.go).
	var live map[*partState]bool
	if w.runningDue.Swap(false) {
		live = map[*partState]bool{}
	}
	w.completed.Store(0)
	tx := &txn{eos: w.cfg.guarantee == ExactlyOnce, offsets: map[string]map[int32]kgo.EpochOffset{}, keep: kgo.EpochOffset{Offset: -1}}
	synced := w.synced.Load()
	var holds func(topic string, p int32) bool
	for _, ps := range w.snapshotParts() {
		if !synced.Has(ps.tp.Topic, ps.tp.Partition) {
			// Moved away without a revoke callback: its next assignment
			// callback releases it (assigned).
			continue
		}
		if ps.unfetched() {
			// Restored ahead of the fetch (lookahead_restore.go): the
			// member's client may not know the partition yet, and a
			// commit of its work would take it for one given away
			// (broker.Member.Commit). Its results wait until it does.
			if holds == nil {
				holds = w.kafka.holds()
			}
			if !holds(ps.tp.Topic, ps.tp.Partition) {
				tx.deferred = true
				continue
			}
		}
		if live != nil {
			live[ps] = true
		}
		w.gatherPart(tx, ps)
	}
	if w.cfg.taskRecords {
		for _, p := range tx.parts {
			tx.recs = w.appendRecordBatches(tx.recs, p.ps, p.results)
		}
		tx.recs = w.appendEmittedBatches(tx.recs, tx.parts)
	}
	if live != nil {
		tx.recs, tx.running = w.appendRunning(tx.recs, live, time.Now())
	}
	// Tombstones of expired IDs go first: a mark of this commit for an ID
	// that expiry removed must come after its tombstone, so that a replay
	// of the changelog ends with the ID present, like the store. They are
	// taken after the results: expiry hands a tombstone over before it
	// deletes the ID, so a task that ran because its ID was gone finds it.
	if tx.eos {
		if tombs := w.takeTombstones(); len(tombs) > 0 {
			tx.recs = append(tombs, tx.recs...)
			for i := range tx.parts {
				tx.parts[i].logStart += len(tombs)
				tx.parts[i].logEnd += len(tombs)
			}
		}
	}
	return tx
}

// gatherPart adds partition ps's finished results to tx: their outputs,
// and with exactly-once their marks and finished ranges in the changelog;
// and its offset, if it moved.
func (w *Worker) gatherPart(tx *txn, ps *partState) {
	res, to, moved, upTo := ps.collect()
	if tx.keep.Offset < 0 && to.Offset >= 0 {
		tx.keepPS, tx.keep = ps, to
	}
	var fin checkpoint.Ranges
	var newFin bool
	if tx.eos {
		fin, newFin = ps.finishedAfter(res, to.Offset)
	}
	if len(res) == 0 && !moved && !newFin {
		return
	}
	p := pending{ps: ps, results: res, to: to, moved: moved, finished: fin, newFin: newFin, upTo: upTo}
	for _, r := range res {
		tx.recs = append(tx.recs, r.outputs...)
	}
	p.logStart = len(tx.recs)
	if tx.eos {
		p.marks = markRecords(res)
		tx.recs = w.appendChangelog(tx.recs, ps.tp, p.marks, res)
		if newFin {
			k, v := checkpoint.EncodeFinished(fin)
			tx.recs = append(tx.recs, &kgo.Record{Topic: broker.ChangelogTopic(w.cfg.group, ps.tp.Topic), Partition: ps.tp.Partition, Key: k, Value: v})
		}
	}
	p.logEnd = len(tx.recs)
	if moved {
		if tx.offsets[ps.tp.Topic] == nil {
			tx.offsets[ps.tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		tx.offsets[ps.tp.Topic][ps.tp.Partition] = to
	}
	tx.parts = append(tx.parts, p)
}

// endCommit ends a commit whose transaction ended, committed or aborted:
// an aborted one's results go back to their partitions (those refused as
// too large as dead letters) for the next commit; a committed one moves
// its partitions' committed offsets, counts its outcomes and, with
// exactly-once, starts its checkpoint write, which runs while the next
// records do: what it holds stays in the partitions' overlays, where
// dedup and State find it, until it is durable.
func (w *Worker) endCommit(tx *txn, committed bool, refused []refusal) {
	if !committed {
		w.metrics.aborts.Inc()
		why := "the group rebalanced, or the offset commit or a write failed"
		if len(refused) > 0 {
			why = "the brokers refused a record as too large: its task is dead-lettered instead"
		}
		w.cfg.log.Info("commit aborted: the next commit takes its finished tasks, the next owners run those of revoked partitions",
			"why", why, "tasks", countResults(tx.parts))
		w.deadLetterRefused(refused, tx.recs, tx.parts)
		for _, p := range tx.parts {
			commitSpans(p.results, false)
			p.ps.putBack(p.results)
		}
		return
	}
	w.hook(BetweenCommits)
	w.restarts = 0
	for _, p := range tx.parts {
		if p.moved || p.newFin {
			p.ps.committedTo(p.to.Offset, p.finished, p.newFin)
		}
	}
	w.countOutcomes(tx.parts)
	for _, p := range tx.parts {
		commitSpans(p.results, true)
	}
	if !tx.eos {
		w.hook(AfterCommits)
		return
	}
	w.ckpt.start(func() error {
		start := time.Now()
		if err := w.checkpoint(tx.recs, tx.parts); err != nil {
			return err
		}
		w.metrics.commit.WithLabelValues("pebble").Observe(time.Since(start).Seconds())
		w.hook(AfterCommits)
		return nil
	})
}

// deadLetterRefused turns the results that wrote records the brokers
// refused as too large into dead letters, so that the next commit can take
// them and their partitions go on.
//
// The owners are all found first: turning a result into a dead letter
// drops its state writes, which moves the changelog indexes owner counts.
// A result with several refused records is turned once.
func (w *Worker) deadLetterRefused(refused []refusal, recs []*kgo.Record, parts []pending) {
	type owned struct {
		ps *partState
		rf refusal
	}
	owners := map[*result]owned{}
	var order []*result
	for _, rf := range refused {
		i := slices.Index(recs, rf.rec)
		for _, p := range parts {
			if res := p.owner(i, recs); res != nil && res.src != nil {
				if _, seen := owners[res]; !seen {
					owners[res] = owned{p.ps, rf}
					order = append(order, res)
				}
				break
			}
		}
	}
	for _, res := range order {
		o := owners[res]
		w.refuseTooLarge(o.ps, res, o.rf.rec, o.rf.err)
	}
}

// owner returns the result that wrote recs[i], if this partition's share
// holds it: its outputs come first, in result order, then its changelog
// records: the mark records, which no one result owns, the state writes
// per result, and the finished ranges, which no result owns either.
func (p *pending) owner(i int, recs []*kgo.Record) *result {
	if i < 0 {
		return nil
	}
	if i >= p.logStart && i < p.logEnd {
		j := p.logStart + len(p.marks)
		if i < j {
			return nil
		}
		for _, r := range p.results {
			if r.noMark {
				continue
			}
			if j += len(r.writes); i < j {
				return r
			}
		}
		return nil
	}
	j := p.logStart
	for k := len(p.results) - 1; k >= 0; k-- {
		j -= len(p.results[k].outputs)
		if i >= j && i < j+len(p.results[k].outputs) {
			return p.results[k]
		}
	}
	return nil
}

// markRecords groups the idempotency keys that ran into mark records, one
// for the commit's partition unless its IDs span more than a second, 4,096
// IDs or 128 KiB: the changelog and the checkpoint get the same records.
func markRecords(res []*result) []checkpoint.Entry {
	n := 0
	for _, r := range res {
		if r.idem && !r.noMark {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	marks := make([]checkpoint.Mark, 0, n)
	for _, r := range res {
		if r.idem && !r.noMark {
			marks = append(marks, checkpoint.Mark{ID: r.id, At: r.at})
		}
	}
	return checkpoint.MarkRecords(marks)
}

// appendChangelog adds a partition's changelog records: its mark records
// and every run's state writes.
func (w *Worker) appendChangelog(recs []*kgo.Record, tp checkpoint.TP, marks []checkpoint.Entry, res []*result) []*kgo.Record {
	topic := broker.ChangelogTopic(w.cfg.group, tp.Topic)
	add := func(k, v []byte) {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: tp.Partition, Key: k, Value: v})
	}
	for _, e := range marks {
		add(e.Encode())
	}
	for _, r := range res {
		if r.noMark {
			continue
		}
		for _, sw := range r.writes {
			if sw.value == nil {
				add(checkpoint.EncodeStateTombstone(sw.key), nil)
			} else {
				add(checkpoint.EncodeState(sw.key, sw.value))
			}
		}
	}
	return recs
}

// expireLoop removes processed IDs past the dedup window at its own pace,
// beside the commits, and queues their changelog tombstones for the next
// commit (takeTombstones). It returns when ctx ends.
func (w *Worker) expireLoop(ctx context.Context) {
	idle := min(w.cfg.dedupWindow/4, expireIdle)
	for {
		n, err := w.store.Expire(ctx, w.cfg.now(), expirePass, w.queueTombstones)
		wait := idle
		switch {
		case err != nil && ctx.Err() == nil:
			w.cfg.log.Warn("expiring processed IDs", "err", err)
		case n >= expirePass:
			wait = 0 // a backlog: go on (the chunks rest between themselves)
		}
		if n > 0 {
			w.metrics.expired.Add(float64(n))
			w.cfg.log.Debug("expired processed IDs", "ids", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// queueTombstones keeps the tombstones expiry hands over for the next
// commit.
func (w *Worker) queueTombstones(rs []checkpoint.Removed) {
	w.tombMu.Lock()
	w.tombs = append(w.tombs, rs...)
	w.tombMu.Unlock()
	if len(rs) > 0 {
		w.cutIdlePoll()
	}
}

// takeTombstones returns the queued tombstones as changelog records, for
// the partitions this worker owns. A commit that fails drops them: a
// changelog record left without its tombstone is restored with IDs past
// the window, which the next expiry removes again.
// hasTombstones says whether expiry handed tombstones over.
func (w *Worker) hasTombstones() bool {
	w.tombMu.Lock()
	defer w.tombMu.Unlock()
	return len(w.tombs) > 0
}

func (w *Worker) takeTombstones() []*kgo.Record {
	w.tombMu.Lock()
	rs := w.tombs
	w.tombs = nil
	w.tombMu.Unlock()
	if len(rs) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	recs := make([]*kgo.Record, 0, len(rs))
	for _, r := range rs {
		if w.parts[r.TP] == nil {
			continue
		}
		recs = append(recs, &kgo.Record{Topic: broker.ChangelogTopic(w.cfg.group, r.TP.Topic), Partition: r.TP.Partition,
			Key: r.Tombstone})
	}
	return recs
}

// checkpoint writes what the transaction committed to Pebble, in one
// synced batch, and then clears it from the partitions' overlays. It runs
// on the checkpoint writer, one write at a time.
func (w *Worker) checkpoint(recs []*kgo.Record, parts []pending) error {
	b := w.store.NewBatch()
	defer b.Close()
	type write struct {
		stateWrite
		seq int // order of the write: of two to one key, the later wins
	}
	var writes []write
	for _, p := range parts {
		tp := p.ps.tp
		for _, e := range p.marks {
			if err := b.MarkRecord(tp, e.Marks); err != nil {
				return fmt.Errorf("consumer: checkpoint: %w", err)
			}
		}
		// Pebble inserts keys in order at a fraction of the cost of
		// random ones (its skiplist starts each search where the last
		// ended). Of two writes of one key the later stays last, and
		// wins.
		writes = writes[:0]
		for _, r := range p.results {
			if r.noMark {
				continue
			}
			for _, sw := range r.writes {
				writes = append(writes, write{sw, len(writes)})
			}
		}
		slices.SortFunc(writes, func(a, b write) int { return cmp.Or(bytes.Compare(a.key, b.key), cmp.Compare(a.seq, b.seq)) })
		for _, sw := range writes {
			var err error
			if sw.value == nil {
				err = b.Delete(tp, sw.key)
			} else {
				err = b.Set(tp, sw.key, sw.value)
			}
			if err != nil {
				return fmt.Errorf("consumer: checkpoint: %w", err)
			}
		}
		cur, ok, err := w.store.Checkpoint(tp)
		if err != nil {
			return fmt.Errorf("consumer: checkpoint: %w", err)
		}
		if !ok {
			cur = checkpoint.Offsets{Source: -1, Changelog: -1}
		}
		if p.moved {
			cur.Source = p.to.Offset
		}
		if p.newFin {
			cur.Finished = p.finished
		}
		if p.logEnd > p.logStart {
			cur.Changelog = recs[p.logEnd-1].Offset + 1
		}
		if err := b.SetOffsets(tp, cur); err != nil {
			return fmt.Errorf("consumer: checkpoint: %w", err)
		}
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("consumer: checkpoint commit failed after the Kafka commit; the changelog replays it on restart: %w", err)
	}
	for _, p := range parts {
		p.ps.checkpointed(p.upTo)
	}
	return nil
}

func (w *Worker) countOutcomes(parts []pending) {
	type key struct{ topic, outcome string }
	counts := map[key]int{}
	for _, p := range parts {
		for _, r := range p.results {
			counts[key{p.ps.tp.Topic, r.outcome}]++
		}
	}
	for k, n := range counts {
		w.metrics.processed.WithLabelValues(w.qlabel(k.topic), k.outcome).Add(float64(n))
	}
}

func countResults(parts []pending) int {
	n := 0
	for _, p := range parts {
		n += len(p.results)
	}
	return n
}

func (w *Worker) hook(p CommitPoint) {
	if w.cfg.commitHook != nil {
		w.cfg.commitHook(p)
	}
}

// ckptWriter runs the checkpoint writes beside the worker's loop, one at a
// time and in the order of their commits: a write reads the checkpoint the
// one before it left (Store.Checkpoint). A write that follows a failed one
// does not run: the first failure stops the worker, whose restart replays
// the changelog from the last checkpoint written.
type ckptWriter struct {
	mu   sync.Mutex
	done chan struct{} // closed when the last write started ends; nil: none yet
	// before is the done of the write before the last: waitBehind waits
	// for it, so that at most two writes are in flight.
	before chan struct{}
	err    error // the first write that failed
}

// start queues write behind the writes started before it.
func (c *ckptWriter) start(write func() error) {
	done := make(chan struct{})
	c.mu.Lock()
	prev := c.done
	c.before, c.done = prev, done
	c.mu.Unlock()
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		if c.failed() != nil {
			return
		}
		if err := write(); err != nil {
			c.mu.Lock()
			c.err = cmp.Or(c.err, err)
			c.mu.Unlock()
		}
	}()
}

// wait waits for every write started, and returns the first failure of
// any write.
func (c *ckptWriter) wait() error {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done != nil {
		<-done
	}
	return c.failed()
}

// waitBehind waits until at most one write is in flight (the last one
// started), and returns the first failure of any write that ended: it
// bounds the commits whose results wait in the partitions' overlays for
// their writes.
func (c *ckptWriter) waitBehind() error {
	c.mu.Lock()
	before := c.before
	c.mu.Unlock()
	if before != nil {
		<-before
	}
	return c.failed()
}

// failed returns the first failure of a write that ended, without waiting.
func (c *ckptWriter) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
