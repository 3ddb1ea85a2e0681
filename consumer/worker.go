package consumer

// The life of a record in a worker, one file per stage:
//
//  1. fetch.go: Run polls the group's partitions; dispatch admits each new
//     record into its partition's offset set (offsets.go) and holds it while
//     the partition restores from its changelog (restore.go).
//  2. dedup.go: the record's idempotency key, if it has one (an ID a
//     client chose), is looked up in the checkpoint, in one batch per
//     fetch.
//  3. schedule.go: the scheduler queues the record behind any earlier,
//     unfinished record of its partition with the same key or dedup key,
//     and runs it on the first free slot.
//  4. execute.go: decode, the dedup decision, expiry, the handler under its
//     time-to-run; outcome.go turns the run into a result: outputs, state
//     writes and, for an idempotency key, a mark; a retry through the
//     delay buckets; or a dead letter.
//  5. partition.go: the result waits in its partition for the next commit;
//     the record leaves the offset set's open records.
//  6. commit.go: every commit interval, whatever is still running, one
//     Kafka transaction commits the finished results and, per partition, the
//     offset of its first open record (kafka.go); then one synced Pebble
//     batch writes the same to the checkpoint, beside the next records.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/limit"
	"github.com/onceq/onceq/internal/ops"
)

// Worker runs handlers over the partitions a consumer group assigns it.
// Create it with New, run it with Run.
type Worker struct {
	cfg     config
	queues  queueSet // cfg.queues, as names and patterns
	metrics *metrics

	store *checkpoint.Store
	admin *broker.Admin
	// scanAdmin is quietScan's, with metadata cached longer.
	scanAdmin *broker.Admin
	kafka     kafkaSide
	// synced is the assignment of the Kafka side's last sync (every
	// partition, with the consumer group protocol, where no sync says),
	// to find the partitions the transact session moved away without a
	// revoke callback.
	synced atomic.Pointer[broker.Assignment]
	topics *topicCache
	sched  *scheduler
	ahead  *lookahead // nil: none (at-least-once, or PriorityLookahead 0)

	mu    sync.Mutex
	parts map[checkpoint.TP]*partState
	// byQueue holds the parts of each queue, for wake-ups. Its slices are
	// read outside mu (wakeQueue), so a removal makes a new one.
	byQueue map[string][]*partState

	buffered  atomic.Int64 // records admitted and not yet finished
	completed atomic.Int64 // records finished since the last commit
	// pollCancel cancels the poll in progress, if any: a poll with
	// nothing to commit waits idlePoll, and the first task to finish
	// ends it (cutIdlePoll).
	pollCancel atomic.Pointer[context.CancelFunc]
	// runningDue: a run is due for its running record (running.go).
	runningDue atomic.Bool
	wake       chan struct{}
	instanceID string
	stopping   atomic.Bool
	started    chan struct{} // closed once Run passed its start
	health     *broker.MemberHealth
	restarts   int // session restarts since the last successful commit
	// nothingToCommit says the last commit found nothing to commit (see
	// commit); only Run's goroutine uses it.
	nothingToCommit bool
	ckpt            ckptWriter

	fetchMu sync.Mutex // orders refetch calls; guards fetchPaused and the replacing of kafka
	// fetchPaused holds the partitions the Kafka side was asked not to
	// fetch (see refetch).
	fetchPaused map[checkpoint.TP]bool
	demand      demand       // the queues wanted, OnDemand
	lastRefresh atomic.Int64 // unix ns of the last metadata refresh for a new queue
	refreshDue  atomic.Bool  // a refresh for a new queue waits for its second
	// noScanWake stops the look at the offsets from waking quiet
	// partitions, so that a test sees the wake-ups do it (export_test.go).
	noScanWake atomic.Bool

	restoresMu sync.Mutex
	restores   restoreQueue

	tombMu sync.Mutex
	tombs  []checkpoint.Removed // changelog tombstones expiry handed over

	control *ctltopic.Reader // cancels and pauses
	// noted holds the unix ns of the last priority note the worker wrote
	// of each topic (notePriority), as topic -> *atomic.Int64.
	noted   sync.Map
	limits  *limit.Client // limits of queues across workers
	pauseMu sync.Mutex    // orders pause changes and the kafka side's start
}

// New checks the options and returns a worker. It does not connect: Run
// does.
func New(opts ...Opt) (*Worker, error) {
	cfg := defaults()
	nils := 0
	for _, o := range opts {
		if o == nil {
			nils++
			continue
		}
		o.apply(&cfg)
	}
	if err := cfg.validate(nils); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, queues: newQueueSet(cfg.queues), parts: map[checkpoint.TP]*partState{}, byQueue: map[string][]*partState{}, wake: make(chan struct{}, 1), started: make(chan struct{}),
		health: broker.NewMemberHealth("consumer", cfg.group, cfg.sessionTimeout), fetchPaused: map[checkpoint.TP]bool{}, demand: demand{wants: map[string]*atomic.Int64{}, made: make(chan struct{}, 1)}}
	w.sched = newScheduler(w, cfg.concurrency, cfg.maxBuffered) // before the metrics, which read it
	w.ahead = newLookahead(w)
	m, err := newMetrics(cfg.registerer, w)
	if err != nil {
		return nil, err
	}
	w.metrics = m
	return w, nil
}

// Started is closed once Run passed its start: the queues exist, the
// changelogs and the checkpoint are open, and the worker goes on to join
// its group. A process that runs services beside a worker (onceq worker's
// delay and workflow services, its scheduler) starts them then, so that a
// worker refused at its start leaves nothing of theirs behind.
func (w *Worker) Started() <-chan struct{} { return w.started }

// ErrTasksCanceled is returned by Run when handlers were still running at
// the shutdown timeout: their contexts were canceled, their results
// dropped, and their tasks run again on the partitions' next owners.
var ErrTasksCanceled = errors.New("consumer: tasks canceled at the shutdown timeout")

// Run joins the group and runs tasks until ctx is done or a fatal error.
// On ctx done it stops starting tasks, lets the running ones finish for up
// to the shutdown timeout while it goes on committing, cancels those still
// running then, commits what finished and leaves the group.
func (w *Worker) Run(ctx context.Context) (err error) {
	if !w.health.Start() {
		return errors.New("consumer: Run called twice: create another Worker")
	}
	defer w.health.Stop(nil)
	if ok, err := ops.Start(ctx, w.cfg.log, w.start, w.close); !ok {
		return err
	}
	close(w.started)
	defer w.close()
	stopBeside, err := w.runBeside(ctx)
	defer stopBeside() // before the store closes (defers run last first)
	if err != nil {
		return err
	}
	defer w.stopping.Store(true) // first of the deferred: restores stop retrying
	w.cfg.log.Info("worker started", "group", w.cfg.group, "queues", w.cfg.queues, "instance", w.instanceID,
		"guarantee", w.cfg.guarantee, "concurrency", w.cfg.concurrency)

	next := time.Now().Add(w.cfg.commitInterval)
	for ctx.Err() == nil {
		if err := w.storeFailed(); err != nil {
			// Tasks cannot finish against a failed store: stop now.
			return fmt.Errorf("%w: %w", errCheckpoint, err)
		}
		if time.Now().After(next) || w.completed.Load() >= int64(w.cfg.maxPerCommit) {
			if err := w.commitOrRestart(ctx); err != nil {
				if errors.Is(err, errStopped) {
					return nil // stopped while restarting: nothing is left to commit
				}
				return err
			}
			next = time.Now().Add(w.cfg.commitInterval)
			continue
		}
		// Fetching stops only for the bound on buffered records, never
		// for a commit: the commit does not wait for running tasks.
		if room := w.cfg.maxBuffered - int(w.buffered.Load()); room > 0 {
			if err := w.pollAndDispatch(ctx, next, room); err != nil {
				return err
			}
		} else {
			w.waitWake(ctx, next)
		}
	}
	return w.shutdown()
}

// runBeside starts what runs beside the worker's loop: expiry, the
// scheduler, the wake-up reader, the quiet partitions' loop and the
// demand loop. stop stops what started, the last first, also when err
// says that something could not start.
func (w *Worker) runBeside(ctx context.Context) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	goLoop := func(loop func(context.Context)) {
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			loop(lctx)
		}()
		stops = append(stops, func() {
			cancel()
			<-done
		})
	}
	if w.store != nil {
		goLoop(w.expireLoop)
	}
	w.sched.run()
	stops = append(stops, w.sched.stop)
	stopWake, err := w.startWakeReader(ctx)
	if err != nil {
		return stop, err
	}
	stops = append(stops, stopWake)
	goLoop(w.quietLoop)
	if w.cfg.onDemand {
		goLoop(w.demandLoop)
	}
	return stop, nil
}

// pollAndDispatch polls for up to room records and dispatches them. With
// nothing to commit, the poll waits longer than the commit interval: the
// first task to finish cuts it short (finish), and the next poll lasts
// until the commit is due, next. A poll with something to commit lasts
// until then: cut short, it would return at once again and again,
// reading nothing, until the commit is due.
func (w *Worker) pollAndDispatch(ctx context.Context, next time.Time, room int) error {
	until := next
	idle := w.nothingToCommit && w.completed.Load() == 0 && !w.hasTombstones() && !w.runningDue.Load()
	if idle {
		until = time.Now().Add(max(w.cfg.commitInterval, idlePoll))
	}
	pctx, cancel := context.WithDeadline(ctx, until)
	if idle {
		w.pollCancel.Store(&cancel)
		if w.completed.Load() > 0 || w.runningDue.Load() || w.hasTombstones() {
			cancel() // one finished meanwhile: poll until the commit is due
		}
	}
	fs := w.kafka.poll(pctx, room)
	if idle {
		w.pollCancel.Store(nil)
	}
	cancel()
	if err := broker.FetchErr(fs); err != nil {
		return w.cfg.conn.Explain(err)
	}
	w.dispatch(fs)
	return nil
}

// commitOrRestart commits; a commit that failed in an unknown state
// restarts the Kafka session, and only a failed checkpoint or too many
// restarts in a row stop the worker.
func (w *Worker) commitOrRestart(runCtx context.Context) error {
	err := w.commitWithin(runCtx)
	if err == nil {
		return nil
	}
	if errors.Is(err, errCheckpoint) {
		return err
	}
	return w.restartSession(runCtx, err)
}

// commitWithin commits, giving up after the transaction timeout (the
// brokers abort the transaction then anyway): a commit with the brokers
// gone must not hold the worker, its shutdown included. Stopping does not
// cancel it.
func (w *Worker) commitWithin(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.txnTimeout)
	defer cancel()
	return w.commit(ctx)
}

// errStopped ends a session restart that Run's context interrupted.
var errStopped = errors.New("consumer: stopped while restarting the Kafka session")

// maxSessionRestarts bounds the session restarts in a row, without a
// successful commit between them, before Run gives up.
const maxSessionRestarts = 5

// restartSession recovers from a failed commit (a transaction in an
// unknown state, a lost connection): it drops everything uncommitted and
// starts a new session, whose InitProducerID fences the old transactional
// producer and aborts its open transaction. The group gives the instance
// its partitions back (static membership) and they run again from their
// committed offsets; records finished above those are found in the
// finished ranges committed with them.
func (w *Worker) restartSession(ctx context.Context, cause error) error {
	w.restarts++
	if w.restarts > maxSessionRestarts {
		return fmt.Errorf("consumer: %d session restarts in a row, giving up: %w", maxSessionRestarts, w.cfg.conn.Explain(cause))
	}
	w.metrics.aborts.Inc()
	w.cfg.log.Warn("commit failed: restarting the Kafka session; uncommitted tasks run again", "err", cause, "restart", w.restarts)
	w.kafka.close()
	w.mu.Lock()
	for tp, ps := range w.parts {
		w.release(ps)
		delete(w.parts, tp)
	}
	clear(w.byQueue)
	w.mu.Unlock()
	select {
	case <-time.After(time.Duration(w.restarts) * 200 * time.Millisecond):
	case <-ctx.Done():
		return errStopped
	}
	var err error
	w.fetchMu.Lock()
	w.kafka, err = newKafkaSide(w)
	clear(w.fetchPaused) // a new client fetches everything it is assigned
	w.fetchMu.Unlock()
	return err
}

// shutdown stops starting tasks, gives the running ones the shutdown
// timeout to finish while committing what finishes, cancels the rest,
// commits and leaves. A canceled task's record stays uncommitted: it runs
// again, once, on its partition's next owner.
func (w *Worker) shutdown() error {
	w.stopping.Store(true)
	w.sched.draining.Store(true)
	running := w.sched.busy()
	w.cfg.log.Info("worker stopping: waiting for running tasks", "running", running, "timeout", w.cfg.shutdownTimeout)
	deadline := time.Now().Add(w.cfg.shutdownTimeout)
	bg := context.Background()
	var err error
	for w.sched.busy() > 0 && time.Now().Before(deadline) && err == nil {
		until := time.Now().Add(w.cfg.commitInterval)
		if until.After(deadline) {
			until = deadline
		}
		w.waitWake(bg, until)
		err = w.commitWithin(bg)
	}
	canceled := 0
	if err == nil && w.sched.busy() > 0 {
		canceled = w.sched.cancelAll()
		w.metrics.canceled.Add(float64(canceled))
		// Handlers that honour their context return at once; wait a
		// moment for them so their slots are free, not for their results.
		for end := time.Now().Add(time.Second); w.sched.busy() > 0 && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		w.cfg.log.Warn("canceled tasks still running at the shutdown timeout: they run again on the partitions' next owners", "count", canceled)
	}
	if err == nil {
		err = w.commitWithin(bg)
	}
	ctx, cancel := context.WithTimeout(bg, w.cfg.txnTimeout)
	defer cancel()
	if cerr := w.ckpt.wait(); cerr != nil && err == nil {
		err = fmt.Errorf("%w: %w", errCheckpoint, cerr)
	}
	w.kafka.leave(ctx)
	w.cfg.log.Info("worker stopped")
	if err == nil && canceled > 0 {
		err = fmt.Errorf("%w: %d", ErrTasksCanceled, canceled)
	}
	return err
}

// storeFailed reports a checkpoint that can no longer be written: a failed
// checkpoint write, or Pebble's fatal error met anywhere (a restore, a
// lookup).
func (w *Worker) storeFailed() error {
	if err := w.ckpt.failed(); err != nil {
		return err
	}
	if w.store != nil {
		return w.store.Err()
	}
	return nil
}

func (w *Worker) waitWake(ctx context.Context, until time.Time) {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-w.wake:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// idlePoll is how long a poll of a worker with nothing to commit waits
// at least, rather than its commit interval: a worker with a short commit
// interval (onceq serve's) does not wake a thousand times a second for
// nothing. Whatever gives a commit something to do cuts it short
// (cutIdlePoll): a task that finished, a run due for its running record,
// an expiry's tombstones. (Longer idle polls, 5 s, cut an idle onceq serve's
// wake-ups further, but added about 0.7 ms to its publish -> consume p99
// at 200 jobs/s, for a reason not found.)
const idlePoll = 250 * time.Millisecond

// cutIdlePoll ends the idle poll in progress, if any: there is a commit
// to make.
func (w *Worker) cutIdlePoll() {
	if cancel := w.pollCancel.Load(); cancel != nil {
		(*cancel)()
	}
}

// finish is called by a slot with a record it finished, successfully or
// not; a nil result means its work was dropped (its partition was
// revoked, or the worker stops) and it stays uncommitted.
func (w *Worker) finish(it *item, res *result) {
	ready := it.ps.complete(it, res)
	if res != nil && w.completed.Add(1) == 1 {
		w.cutIdlePoll()
	}
	w.buffered.Add(-1)
	w.sched.done(it)
	w.sched.start(ready)
	if w.buffered.Load() == 0 || w.completed.Load() >= int64(w.cfg.maxPerCommit) {
		w.signal()
	}
}

// dropped accounts for admitted records thrown away before they started.
func (w *Worker) dropped(n int) {
	if n > 0 {
		w.buffered.Add(-int64(n))
		w.signal()
	}
}

// release lets go of a partition: nothing of it starts or commits any
// more, and its running handlers are canceled.
func (w *Worker) release(ps *partState) {
	w.ahead.drop(ps)
	w.dropped(ps.revoke() + w.sched.drop(ps))
	w.sched.cancelPartition(ps)
}

// assigned and revoked are the group's callbacks (the member notes the
// join first). They must not block on the commit loop: the transact
// session holds its lock while calling them.
// A revoked partition is released at once, its tasks still running or
// not: whatever they finish is dropped, and the session aborts the commit
// in progress, so the next owner runs them from the committed offset.
func (w *Worker) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	var added []*partState
	w.mu.Lock()
	for topic, ps := range m {
		for _, p := range ps {
			tp := checkpoint.TP{Topic: topic, Partition: p}
			if old := w.parts[tp]; old != nil {
				w.release(old)
				w.byQueue[topic] = slices.DeleteFunc(slices.Clone(w.byQueue[topic]), func(o *partState) bool { return o == old })
			}
			st := newPartState(tp, w.store)
			st.inflight, st.latency = w.metrics.inflight.WithLabelValues(w.qlabel(topic)), w.metrics.latency.WithLabelValues(w.qlabel(topic))
			// An at-least-once worker restores nothing, once its queue's
			// topics exist (a pattern's queues get them in a restore pass).
			if w.cfg.guarantee == AtLeastOnce && w.topics.isPrepared(topic) {
				st.restored = true
			}
			st.q.active = time.Now()
			if !w.queues.named[topic] && w.control != nil && w.control.Paused(topic) {
				go w.setPaused(topic, true) // a pattern's queue, paused before it was found
			}
			w.parts[tp] = st
			w.byQueue[topic] = append(w.byQueue[topic], st)
			added = append(added, st)
		}
	}
	// The sync before this call may have taken partitions from the worker
	// without a revoke callback (see broker.Assignment): they go as
	// revoked ones do.
	var gone []checkpoint.TP
	synced := w.synced.Load()
	for tp := range w.parts {
		if !synced.Has(tp.Topic, tp.Partition) {
			w.drop(tp)
			gone = append(gone, tp)
		}
	}
	w.mu.Unlock()
	if len(gone) > 0 {
		w.cfg.log.Info("partitions revoked without a callback: released", "partitions", gone)
	}
	// Before the client fetches them (it calls this first): a partition
	// of a queue not wanted starts unfetched, and one the client still
	// holds paused from an earlier assignment is fetched again.
	w.refetch(added...)
	w.ahead.assigned(added)
	w.cfg.log.Info("partitions assigned", "partitions", m)
}

func (w *Worker) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			w.drop(checkpoint.TP{Topic: topic, Partition: p})
		}
	}
	w.cfg.log.Info("partitions revoked", "partitions", m)
}

// lost releases the partitions of m that a commit of the partitions
// sources found the group gave to others without a revoke callback
// (broker.NotAssignedError). A partition the worker holds in a state
// other than the commit's was assigned to it again since, its revocation
// unheard (kgo's transact session passes on one revocation between two
// commits): that state is the new assignment's, fetching and running from
// the group's committed offset, and stays. Released, the partition's
// records would be dropped as not the worker's while the client goes on
// fetching them, and it would stall until the next rebalance.
func (w *Worker) lost(m map[string][]int32, sources []*partState) {
	w.mu.Lock()
	var gone, kept []checkpoint.TP
	for topic, ps := range m {
		for _, p := range ps {
			tp := checkpoint.TP{Topic: topic, Partition: p}
			if st := w.parts[tp]; st != nil && !slices.Contains(sources, st) {
				kept = append(kept, tp)
				continue
			}
			w.drop(tp)
			gone = append(gone, tp)
		}
	}
	w.mu.Unlock()
	if len(gone) > 0 {
		w.cfg.log.Info("partitions revoked without a callback: released", "partitions", gone)
	}
	if len(kept) > 0 {
		w.cfg.log.Info("partitions assigned again since the commit: kept", "partitions", kept)
	}
}

// drop releases the partition tp, if the worker has it, and forgets it;
// the caller holds w.mu.
func (w *Worker) drop(tp checkpoint.TP) {
	st := w.parts[tp]
	if st == nil {
		return
	}
	w.release(st)
	delete(w.parts, tp)
	w.byQueue[tp.Topic] = slices.DeleteFunc(slices.Clone(w.byQueue[tp.Topic]), func(o *partState) bool { return o == st })
	if len(w.byQueue[tp.Topic]) == 0 {
		delete(w.byQueue, tp.Topic)
	}
}

func (w *Worker) snapshotParts() []*partState {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*partState, 0, len(w.parts))
	for _, p := range w.parts {
		out = append(out, p)
	}
	return out
}

func (w *Worker) close() {
	w.ahead.close() // before the checkpoint closes: its restores use it
	if w.kafka != nil {
		w.kafka.close()
	}
	if w.control != nil {
		w.control.Close()
	}
	if w.limits != nil {
		w.limits.Close()
	}
	if w.admin != nil {
		w.admin.Close()
	}
	if w.scanAdmin != nil {
		w.scanAdmin.Close()
	}
	if w.store != nil {
		_ = w.ckpt.wait() // reported by the commit or shutdown that waited before
		if err := w.store.Close(); err != nil {
			w.cfg.log.Error("closing checkpoint", "err", err)
		}
	}
}

// Conn returns the worker's broker connection.
func (w *Worker) Conn() broker.Conn { return w.cfg.conn }
