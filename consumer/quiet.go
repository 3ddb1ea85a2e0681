package consumer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// Quiet partitions. Every fetch names every partition it follows, and the
// brokers and the client both pay for each one on every fetch, so a worker
// over thousands of queues that fetched them all would spend its time on
// queues with nothing in them. Instead a partition that had no record and
// no wake-up for QuietAfter, and whose every record (and transaction
// marker: the client passes them on, KeepControlRecords) below its last
// stable offset the worker has received, goes quiet: the worker stops
// fetching it and remembers that offset. It is fetched again when
//   - a wake-up names its queue (broker.WakeTopic: onceq's producers, the
//     worker's own commits and the delay service write them), or
//   - a look at the quiet partitions' last stable offsets (every
//     quietScanEvery, one ListOffsets request for all of them) finds one
//     past the remembered offset: a task written by another client.
//
// Nothing is lost by stopping a fetch: the client keeps the partition's
// position, drops what it buffered for it, and fetches from there again.
// And a partition goes quiet only once the worker received everything
// below the offset it remembers: what it received is at least its
// group's committed offset (where its fetching started) and the offset
// after every record and marker it was handed since.

// DefaultQuietAfter is how long a partition goes without records and
// wake-ups before it may go quiet. It must exceed broker.WakeEvery, so
// that a task written within WakeEvery of its queue's last wake-up finds
// the partition still fetched.
const DefaultQuietAfter = 2 * time.Second

// quietScanEvery is how often the worker looks at its partitions' last
// stable offsets, at least (see scanEvery).
const quietScanEvery = time.Second

// quietness is a partition's part in this, guarded by its mu.
type quietness struct {
	quiet    bool  // its fetching is stopped
	quietLSO int64 // its last stable offset when it went quiet
	active   time.Time
	// seen is the offset after the last record or marker the worker
	// received, or its group's committed offset if that is more; start
	// says the committed offset was looked up.
	seen  int64
	start bool
}

// wakeLocked marks ps active: fetched, and not quiet for QuietAfter. ps.mu
// is held; the caller applies the change with refetch. It reports whether
// ps was quiet.
func (w *Worker) wakeLocked(ps *partState, now time.Time) bool {
	ps.q.active = now
	if !ps.q.quiet {
		return false
	}
	ps.q.quiet = false
	return true
}

// refetch stops or resumes fetching parts as their state asks: a
// partition is fetched unless it is quiet or, OnDemand, its queue is not
// wanted (demand.go). It makes one call to the client each way: franz-go
// copies its whole set of paused partitions on every call, so one call per
// partition would cost a worker over thousands of them the square of their
// number. Every change to a partition's quiet state or its queue's want is
// followed by a refetch of it, and refetches run one at a time reading the
// state as it is then, so the client ends up as the last change asked.
//
// What the client pauses is kept by partition (fetchPaused), not by
// partState: the client's paused set outlives an assignment, so a
// partition revoked while paused and assigned again is still paused
// there, whatever its new partState says.
func (w *Worker) refetch(parts ...*partState) {
	if len(parts) == 0 {
		return
	}
	w.fetchMu.Lock()
	defer w.fetchMu.Unlock()
	if w.kafka == nil {
		return // not started: the first refetch of a partition is at its assignment
	}
	var pause, resume map[string][]int32
	for _, ps := range parts {
		ps.mu.Lock()
		revoked := ps.revoked
		stop := ps.q.quiet
		ps.mu.Unlock()
		if revoked {
			continue // its partition may have another partState by now
		}
		stop = stop || !w.wanted(ps.tp.Topic)
		if stop == w.fetchPaused[ps.tp] {
			continue
		}
		if stop {
			w.fetchPaused[ps.tp] = true
		} else {
			delete(w.fetchPaused, ps.tp)
		}
		m := &resume
		if stop {
			m = &pause
		}
		if *m == nil {
			*m = map[string][]int32{}
		}
		(*m)[ps.tp.Topic] = append((*m)[ps.tp.Topic], ps.tp.Partition)
	}
	if len(pause) > 0 {
		w.kafka.pause(pause)
	}
	if len(resume) > 0 {
		w.kafka.resume(resume)
	}
}

// wakeQueue wakes the partitions of queue this worker owns, and appends
// those that were quiet to woken, for a refetch.
func (w *Worker) wakeQueue(queue string, now time.Time, woken []*partState) []*partState {
	w.mu.Lock()
	parts := w.byQueue[queue]
	w.mu.Unlock()
	if len(parts) == 0 && w.queues.matches(queue) {
		w.newQueue(now)
	}
	for _, ps := range parts {
		ps.mu.Lock()
		if !ps.revoked && w.wakeLocked(ps, now) {
			woken = append(woken, ps)
		}
		ps.mu.Unlock()
	}
	return woken
}

// countsEvery is how many looks at the offsets pass between two refreshes
// of the partition counts of the worker's queues (see topicCache.seed).
const countsEvery = 10

// newQueueEvery bounds how often a worker asks for the brokers' topics
// for new queues: each answer names every topic.
const newQueueEvery = 200 * time.Millisecond

// newQueue asks the client for the brokers' topics, at most every
// newQueueEvery: a wake-up named a queue that matches a pattern and that
// no member of the group may have yet. One asked for sooner is made when
// that time is up, not dropped: a queue made right after another would
// wait for the client's next refresh otherwise.
func (w *Worker) newQueue(now time.Time) {
	last := w.lastRefresh.Load()
	if wait := time.Duration(last + int64(newQueueEvery) - now.UnixNano()); wait > 0 {
		if w.refreshDue.CompareAndSwap(false, true) {
			time.AfterFunc(wait, func() {
				w.refreshDue.Store(false)
				w.newQueue(time.Now())
			})
		}
		return
	}
	if !w.lastRefresh.CompareAndSwap(last, now.UnixNano()) {
		return // another refresh, now
	}
	w.fetchMu.Lock() // w.kafka is replaced under it
	defer w.fetchMu.Unlock()
	if w.kafka != nil {
		w.kafka.refreshMetadata()
	}
}

// quietLoop looks at the partitions' last stable offsets every
// quietScanEvery until ctx ends, and every countsEvery looks refreshes the
// partition counts of its queues, in one request for all.
func (w *Worker) quietLoop(ctx context.Context) {
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.scanEvery()):
			w.quietScan(ctx)
			if n%countsEvery == 0 {
				w.refreshCounts(ctx)
			}
		}
	}
}

// scanEvery is how long the worker waits between two looks at its
// partitions' offsets: quietScanEvery, and a second more for each
// scanPartitions partitions past the first, up to maxScanEvery. A look
// costs in proportion to the partitions, and what it finds (tasks written
// without a wake-up, by other clients) may wait a little longer on a
// worker with many of them.
func (w *Worker) scanEvery() time.Duration {
	w.mu.Lock()
	n := len(w.parts)
	w.mu.Unlock()
	return min(quietScanEvery*time.Duration(1+n/scanPartitions), maxScanEvery)
}

// scanMetadataAge is how long the looks reuse the leaders they know: a
// partition whose leader moved meanwhile is left out of a look or two.
const scanMetadataAge = 30 * time.Second

// How scanEvery grows with the partitions.
const (
	scanPartitions = 2000
	maxScanEvery   = 5 * time.Second
)

// refreshCounts asks for the partition counts of every queue the worker
// owns partitions of.
func (w *Worker) refreshCounts(ctx context.Context) {
	w.mu.Lock()
	queues := make([]string, 0, len(w.byQueue))
	for q := range w.byQueue {
		queues = append(queues, q)
	}
	w.mu.Unlock()
	at := time.Now()
	counts, err := w.admin.PartitionCounts(ctx, queues...)
	if err != nil {
		w.cfg.log.Debug("refreshing the queues' partition counts", "err", err)
		return
	}
	w.topics.seed(counts, at)
}

// quietScan makes quiet the partitions that may be, and fetches again the
// quiet ones that have new records.
func (w *Worker) quietScan(ctx context.Context) {
	parts := w.snapshotParts()
	if len(parts) == 0 {
		return
	}
	asked := map[string][]int32{}
	for _, ps := range parts {
		asked[ps.tp.Topic] = append(asked[ps.tp.Topic], ps.tp.Partition)
	}
	sctx, cancel := context.WithTimeout(ctx, quietScanEvery)
	defer cancel()
	lso, err := w.scanAdmin.StableOffsets(sctx, asked)
	if err != nil {
		w.cfg.log.Debug("looking at the partitions' last stable offsets", "err", err)
		return
	}
	w.startOffsets(sctx, parts)
	now := time.Now()
	quiet := 0
	var changed []*partState
	for _, ps := range parts {
		o, ok := lso[ps.tp.Topic][ps.tp.Partition]
		if !ok {
			continue
		}
		ps.mu.Lock()
		if w.scanLocked(ps, o, now) {
			changed = append(changed, ps)
		}
		if ps.q.quiet {
			quiet++
		}
		ps.mu.Unlock()
	}
	w.refetch(changed...)
	w.metrics.quiet.Set(float64(quiet))
}

// scanLocked is quietScan's decision for one partition, whose last stable
// offset is lso; it reports whether ps went quiet or was woken. ps.mu is
// held.
func (w *Worker) scanLocked(ps *partState, lso int64, now time.Time) bool {
	switch {
	case ps.revoked:
		return false
	case ps.q.quiet:
		return lso > ps.q.quietLSO && !w.noScanWake.Load() && w.wakeLocked(ps, now)
	case ps.q.seen >= lso && len(ps.held) == 0 && now.Sub(ps.q.active) >= w.cfg.quietAfter:
		ps.q.quiet, ps.q.quietLSO = true, lso
		return true
	}
	return false
}

// startOffsets looks up, once per partition, the group's committed offset
// of the partitions that have not yet been: the fetching of a partition
// starts there, so the worker has received everything before it.
func (w *Worker) startOffsets(ctx context.Context, parts []*partState) {
	var unknown []*partState
	for _, ps := range parts {
		ps.mu.Lock()
		if !ps.q.start {
			unknown = append(unknown, ps)
		}
		ps.mu.Unlock()
	}
	if len(unknown) == 0 {
		return
	}
	committed, err := w.admin.Kadm().FetchOffsets(ctx, w.cfg.group)
	if err != nil {
		w.cfg.log.Debug("looking up the group's committed offsets", "err", err)
		return
	}
	for _, ps := range unknown {
		o, ok := committed.Lookup(ps.tp.Topic, ps.tp.Partition)
		ps.mu.Lock()
		if ok && o.Err == nil {
			ps.q.seen = max(ps.q.seen, o.At)
		}
		ps.q.start = true
		ps.mu.Unlock()
	}
}

// wakeGap is the least time between two refetches of woken partitions: a
// refetch costs the client a copy of its whole set of paused partitions,
// so wake-ups arriving one by one are applied together, at most every
// wakeGap, at the price of as much latency for a task on a quiet queue.
const wakeGap = 2 * time.Millisecond

// wakeLoop reads the wake-ups written from now on and wakes the queues
// they name, until ctx ends.
func (w *Worker) wakeLoop(ctx context.Context, cl *kgo.Client) {
	var last time.Time
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || broker.FetchErr(fs) != nil {
			return
		}
		now := time.Now()
		var woken []*partState
		fs.EachRecord(func(r *kgo.Record) { woken = w.wakeQueue(string(r.Key), now, woken) })
		if len(woken) == 0 {
			continue
		}
		if wait := wakeGap - time.Since(last); wait > 0 {
			// Wake-ups of the meantime wait in the client for the next
			// poll; the next refetch takes them all.
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		w.refetch(woken...)
		last = time.Now()
	}
}

// startWakeReader starts reading the wake-ups, from their end.
func (w *Worker) startWakeReader(ctx context.Context) (stop func(), err error) {
	cl, err := w.cfg.conn.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{broker.WakeTopic: {0: kgo.NewOffset().AtEnd()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.WithLogger(broker.KgoLogger(w.cfg.log)),
	)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.wakeLoop(ctx, cl)
	}()
	return func() {
		cancel()
		cl.Close()
		<-done
	}, nil
}
