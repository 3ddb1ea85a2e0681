package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
)

// Worker runs handlers over the partitions a consumer group assigns it.
// Create it with New, run it with Run.
type Worker struct {
	cfg     config
	metrics *metrics

	store    *checkpoint.Store
	admin    *broker.Admin
	kafka    kafkaSide
	restorer *restorer
	topics   *topicCache
	lanes    *lanes

	mu    sync.Mutex
	parts map[checkpoint.TP]*partState

	buffered   atomic.Int64 // records admitted and not yet finished
	completed  atomic.Int64 // records finished since the last commit
	wake       chan struct{}
	instanceID string
	stopping   atomic.Bool
	unfinished atomic.Bool // a record was dropped unrun: commit nothing more
	restarts   int         // session restarts since the last successful commit
	lastExpire time.Time
	ckpt       ckptWriter
}

// New checks the options and returns a worker. It does not connect: Run
// does.
func New(opts ...Opt) (*Worker, error) {
	cfg := defaults()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, parts: map[checkpoint.TP]*partState{}, wake: make(chan struct{}, 1)}
	m, err := newMetrics(cfg.registerer)
	if err != nil {
		return nil, err
	}
	w.metrics = m
	return w, nil
}

// Run joins the group and runs tasks until ctx is done or a fatal error.
// On ctx done it stops fetching, lets in-flight handlers finish (up to the
// shutdown timeout), commits what completed, and leaves the group.
func (w *Worker) Run(ctx context.Context) (err error) {
	if err := w.start(ctx); err != nil {
		w.close()
		if ctx.Err() != nil {
			// Stopped while starting: nothing ran, nothing to commit.
			w.cfg.log.Info("worker stopped while starting", "err", err)
			return nil
		}
		return err
	}
	defer w.close()
	w.lanes = newLanes(w, w.cfg.concurrency, w.cfg.maxBuffered)
	defer w.lanes.stop()
	defer w.stopping.Store(true) // first of the deferred: restores stop retrying
	w.cfg.log.Info("worker started", "group", w.cfg.group, "queues", w.cfg.queues, "instance", w.instanceID,
		"guarantee", w.cfg.guarantee, "concurrency", w.cfg.concurrency)

	next := time.Now().Add(w.cfg.commitInterval)
	lastWarn := time.Now()
	for ctx.Err() == nil {
		if err := w.storeFailed(); err != nil {
			// Tasks cannot finish against a failed store: stop now, not at
			// the commit that would wait for them.
			return fmt.Errorf("%w: %w", errCheckpoint, err)
		}
		due := time.Now().After(next) || w.completed.Load() >= int64(w.cfg.maxPerCommit)
		switch {
		case !due && w.buffered.Load() < int64(w.cfg.maxBuffered):
			pctx, cancel := context.WithDeadline(ctx, next)
			fs := w.kafka.poll(pctx, w.cfg.maxBuffered-int(w.buffered.Load()))
			cancel()
			if err := broker.FetchErr(fs); err != nil {
				return err
			}
			w.dispatch(fs)
		case !due:
			w.waitWake(ctx, next)
		case w.buffered.Load() > 0:
			// The commit barrier: the transaction commits the position of
			// everything polled, so every dispatched record must finish
			// first. Nothing more is polled meanwhile.
			w.waitWake(ctx, time.Now().Add(50*time.Millisecond))
			if time.Since(lastWarn) > 10*time.Second && time.Since(next) > 10*time.Second {
				lastWarn = time.Now()
				w.cfg.log.Warn("commit waits for slow tasks", "in_flight", w.buffered.Load(), "waiting", time.Since(next).Round(time.Second))
			}
		default:
			if err := w.commit(context.WithoutCancel(ctx)); err != nil {
				if errors.Is(err, errCheckpoint) || w.unfinished.Load() {
					return err
				}
				if err := w.restartSession(ctx, err); err != nil {
					return err
				}
			}
			next = time.Now().Add(w.cfg.commitInterval)
		}
	}
	return w.shutdown()
}

// maxSessionRestarts bounds the session restarts in a row, without a
// successful commit between them, before Run gives up.
const maxSessionRestarts = 5

// restartSession recovers from a failed commit (a transaction in an
// unknown state, a lost connection): it drops everything uncommitted and
// starts a new session, whose InitProducerID fences the old transactional
// producer and aborts its open transaction. The group gives the instance
// its partitions back (static membership) and they run again from their
// committed offsets.
func (w *Worker) restartSession(ctx context.Context, cause error) error {
	w.restarts++
	if w.restarts > maxSessionRestarts {
		return fmt.Errorf("consumer: %d session restarts in a row, giving up: %w", maxSessionRestarts, cause)
	}
	w.metrics.aborts.Inc()
	w.cfg.log.Warn("commit failed: restarting the Kafka session; uncommitted tasks run again", "err", cause, "restart", w.restarts)
	w.resetAll()
	w.kafka.close()
	w.mu.Lock()
	for tp, ps := range w.parts {
		w.dropped(ps.revoke())
		delete(w.parts, tp)
	}
	w.mu.Unlock()
	select {
	case <-time.After(time.Duration(w.restarts) * 200 * time.Millisecond):
	case <-ctx.Done():
		return nil
	}
	var err error
	w.kafka, err = newKafkaSide(w)
	return err
}

// shutdown drains in-flight handlers, commits and leaves. If some are still
// running at the shutdown timeout, nothing more is committed: their tasks,
// and those completed since the last commit, run again on the partitions'
// next owners.
func (w *Worker) shutdown() error {
	w.stopping.Store(true)
	w.cfg.log.Info("worker stopping: draining in-flight tasks", "in_flight", w.buffered.Load(), "timeout", w.cfg.shutdownTimeout)
	deadline := time.Now().Add(w.cfg.shutdownTimeout)
	for w.buffered.Load() > 0 && time.Now().Before(deadline) {
		w.waitWake(context.Background(), time.Now().Add(50*time.Millisecond))
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.txnTimeout)
	defer cancel()
	var err error
	if n := w.buffered.Load(); n > 0 || w.unfinished.Load() {
		w.cfg.log.Warn("abandoning tasks still running at shutdown: they and the tasks since the last commit run again elsewhere", "count", n)
	} else {
		err = w.commit(ctx)
	}
	if cerr := w.ckpt.wait(); cerr != nil && err == nil {
		err = fmt.Errorf("%w: %w", errCheckpoint, cerr)
	}
	w.kafka.leave(ctx)
	w.cfg.log.Info("worker stopped")
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

// dispatch hands fetched records to the lanes, or holds them while their
// partition restores from its changelog.
func (w *Worker) dispatch(fs kgo.Fetches) {
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		tp := checkpoint.TP{Topic: fp.Topic, Partition: fp.Partition}
		w.mu.Lock()
		ps := w.parts[tp]
		w.mu.Unlock()
		if ps == nil {
			return // not ours (any more)
		}
		last := fp.Records[len(fp.Records)-1]
		w.metrics.lag.WithLabelValues(fp.Topic, strconv.Itoa(int(fp.Partition))).Set(float64(fp.HighWatermark - last.Offset - 1))
		items := make([]*item, 0, len(fp.Records))
		for _, r := range fp.Records {
			epoch, ok := ps.admit(r)
			if !ok {
				continue
			}
			w.buffered.Add(1)
			items = append(items, &item{ps: ps, epoch: epoch, rec: r})
		}
		if w.holdIfRestoring(ps, items) {
			return
		}
		w.submit(ps, items)
	})
}

// submit looks the items' dedup keys up in one batch and hands them to
// their lanes.
func (w *Worker) submit(ps *partState, items []*item) {
	eos := w.cfg.guarantee == ExactlyOnce
	if eos {
		if err := ps.lookup(items); err != nil {
			w.cfg.log.Warn("looking up processed IDs; the lanes will ask again", "err", err)
		}
	}
	w.lanes.submit(items, eos)
}

// holdIfRestoring holds it while ps restores, starting the restore on the
// first record: by then the group's committed offset was fetched as stable,
// so every transaction of the previous owner is complete and the changelog
// holds all of its marks.
func (w *Worker) holdIfRestoring(ps *partState, items []*item) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.restored {
		return false
	}
	ps.held = append(ps.held, items...)
	if !ps.restorer {
		ps.restorer = true
		w.kafka.pause(ps.tp)
		go w.restore(ps)
	}
	return true
}

func (w *Worker) restore(ps *partState) {
	start := time.Now()
	n, err := w.restorer.restore(ps.tp)
	if err != nil {
		w.cfg.log.Error("restoring partition from changelog failed; retrying", "topic", ps.tp.Topic, "partition", ps.tp.Partition, "err", err)
		time.Sleep(time.Second)
		ps.mu.Lock()
		gone := ps.revoked
		ps.mu.Unlock()
		if !gone && !w.stopping.Load() {
			go w.restore(ps)
		}
		return
	}
	w.metrics.restore.Observe(time.Since(start).Seconds())
	w.cfg.log.Info("partition restored", "topic", ps.tp.Topic, "partition", ps.tp.Partition, "changelog_records", n, "took", time.Since(start).Round(time.Millisecond))
	ps.mu.Lock()
	ps.restored = true
	held := ps.held
	ps.held = nil
	ps.mu.Unlock()
	w.submit(ps, held)
	w.kafka.resume(ps.tp)
}

// finish is called by a lane with the records it finished, successfully
// or not. A nil result for a record whose partition did not move on means
// its work was dropped (the worker is stopping): the position past it must
// then never be committed.
func (w *Worker) finish(done []finished) {
	for i := 0; i < len(done); {
		ps := done[i].it.ps
		j := i + 1
		for j < len(done) && done[j].it.ps == ps {
			j++
		}
		if ps.complete(done[i:j]) {
			w.unfinished.Store(true)
		}
		i = j
	}
	w.completed.Add(int64(len(done)))
	w.buffered.Add(-int64(len(done)))
	w.signal()
}

// dropped accounts for held records thrown away unrun.
func (w *Worker) dropped(n int) {
	if n > 0 {
		w.buffered.Add(-int64(n))
		w.signal()
	}
}

// assigned and revoked are the group's callbacks. They must not block on
// the commit loop: the transact session holds its lock while calling them.
func (w *Worker) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			tp := checkpoint.TP{Topic: topic, Partition: p}
			if old := w.parts[tp]; old != nil {
				w.dropped(old.revoke())
			}
			st := newPartState(tp, w.store)
			if w.cfg.guarantee == AtLeastOnce {
				st.restored = true
			}
			w.parts[tp] = st
		}
	}
	w.cfg.log.Info("partitions assigned", "partitions", m)
}

func (w *Worker) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for topic, ps := range m {
		for _, p := range ps {
			tp := checkpoint.TP{Topic: topic, Partition: p}
			if st := w.parts[tp]; st != nil {
				w.dropped(st.revoke())
				delete(w.parts, tp)
				w.metrics.lag.DeleteLabelValues(topic, fmt.Sprint(p))
			}
		}
	}
	w.cfg.log.Info("partitions revoked", "partitions", m)
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
	if w.kafka != nil {
		w.kafka.close()
	}
	if w.restorer != nil {
		w.restorer.close()
	}
	if w.admin != nil {
		w.admin.Close()
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
