package pull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/instance"
	"github.com/onceq/onceq/internal/limit"
)

// The pull worker's life. Start starts the server's pull worker and waits
// until it started (its queues, changelogs and checkpoint open): a worker
// that cannot start, such as one whose checkpoint in the data dir belongs
// to another pull group, fails Start. A worker that stops later (its
// brokers, its checkpoint, too many failed commits in a row) is replaced
// by a new consumer.Worker after a pause that doubles from
// pullRestartMin to pullRestartMax while its successors keep stopping;
// meanwhile the probes say so (healthy, ready). Every worker that starts
// is told the wants it must serve (wantAll): those of this server's
// consumers, and those the lease topic holds of the other servers'
// (wantRemote), which it read before the first worker existed.

// Pauses before a stopped pull worker's successor starts.
const (
	pullRestartMin = time.Second
	pullRestartMax = 30 * time.Second
	// pullSteady is how long a worker runs before the pause after it
	// is pullRestartMin again.
	pullSteady = time.Minute
)

// workerLife is what runs the pull workers: build makes one, stop ends
// the run, done is closed once it ended, and down says why no worker
// runs now (nil: one does).
type workerLife struct {
	build   func() (*consumer.Worker, error)
	metrics *workerMetrics
	stop    context.CancelFunc
	done    chan struct{}
	down    atomic.Pointer[stopped]
}

// stopped is a pull worker that stopped, why and when.
type stopped struct {
	err error
	at  time.Time
}

// Config is what a server's pull needs.
type Config struct {
	Conn broker.Conn
	Log  *slog.Logger
	Reg  prometheus.Registerer
	// Group is the pull group; Slots, Held and Retention are its worker's
	// consumer.MaxRunningPerQueue, Concurrency and ResultRetention.
	Group     string
	Slots     int
	Held      int
	Retention time.Duration
	// DataDir keeps the worker's checkpoint and instance ID (empty: a
	// checkpoint in memory, a new instance ID each start).
	DataDir string
	// Lane is the server's lane (empty: a topic per queue), made with
	// Partitions if it does not exist.
	Lane       string
	Partitions int32
	// ReleaseAfter and AckRunWait are the constants of their names
	// unless a test shortens them.
	ReleaseAfter time.Duration
	AckRunWait   time.Duration
	// Records are the tasks' records, which an acknowledgment waits on.
	Records Records
}

// Open opens the pull group's leases and the queues' limits, read to
// their ends; Start starts the worker.
func Open(ctx context.Context, cfg Config) (*Pull, error) {
	pl := &Pull{cfg: cfg, queues: map[string]*Queue{}, known: map[string]bool{}, remote: map[string]time.Time{}, quit: make(chan struct{}),
		releaseAfter: cfg.ReleaseAfter, lane: cfg.Lane}
	var err error
	if pl.ledger, err = openLedger(ctx, cfg.Conn, cfg.Group, cfg.Log.With("component", "leases"), pl.wantRemote, pl.offerGranted, pl.running); err != nil {
		return nil, err
	}
	if pl.limits, err = limit.Open(ctx, cfg.Conn, cfg.Log.With("component", "limits")); err != nil {
		pl.ledger.close()
		return nil, err
	}
	return pl, nil
}

// Limits are the queues' limits, which the hand-outs hold places of.
func (pl *Pull) Limits() *limit.Client { return pl.limits }

// Start starts the pull worker and waits, until ctx ends, until it
// started.
func (pl *Pull) Start(ctx context.Context) error {
	cfg := pl.cfg
	patterns := []string{pullPattern}
	if cfg.Lane != "" {
		// And the topics of queues a server without a lane kept, whose
		// jobs move to their lane queues (legacy.go).
		patterns = append(patterns, regexp.QuoteMeta(cfg.Lane)+string(onceq.LaneSep)+laneLabelPattern)
		adm, err := broker.NewAdmin(cfg.Conn)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = adm.EnsureTopic(ctx, cfg.Lane, max(cfg.Partitions, 1), nil)
		cancel()
		adm.Close()
		if err != nil {
			return fmt.Errorf("making the lane %s: %w", cfg.Lane, err)
		}
	}
	// The worker's instance ID, as the worker keeps it, known before it
	// starts: the ledger answers probes of it (failover.go).
	pl.group, pl.instance, pl.log = cfg.Group, instance.New("onceq-"), cfg.Log.With("component", "pull")
	if cfg.DataDir != "" {
		var err error
		if pl.instance, err = instance.Load(filepath.Join(cfg.DataDir, "pull"), "instance-id", "w-"); err != nil {
			return fmt.Errorf("serve: the pull worker's instance ID: %w", err)
		}
	}
	pl.removals = prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_serve_pull_members_removed_total",
		Help: "Servers this server removed from the pull group for answering no probe (taken for dead), so that their jobs move at once."})
	if err := cfg.Reg.Register(pl.removals); err != nil {
		return fmt.Errorf("serve: registering metrics: %w", err)
	}
	pl.ledger.answerFor(pl.instance, func() {
		if w := pl.w.Load(); w != nil {
			w.Rejoin()
		}
	})
	life := &pl.life
	life.metrics = &workerMetrics{Registerer: cfg.Reg}
	opts := []consumer.Opt{consumer.Conn(cfg.Conn), consumer.Logger(cfg.Log.With("component", "pull")), consumer.Queues(patterns...),
		consumer.Group(cfg.Group), consumer.OnDemand(true), consumer.Concurrency(cfg.Held), consumer.MaxRunningPerQueue(cfg.Slots),
		consumer.MaxBufferedRecords(cfg.Held + consumer.DefaultMaxBufferedRecords), // the held tasks and a fetch's
		consumer.TaskTimeout(HoldMax), consumer.CommitInterval(pullCommitInterval), consumer.ShutdownTimeout(pullShutdown),
		consumer.WithHandler(consumer.HandlerFunc(pl.handle)), consumer.ResultRetention(cfg.Retention),
		consumer.MetricsPerQueue(false), consumer.Registerer(life.metrics), consumer.QuietAfter(pullQuietAfter),
		consumer.OwnLimits(true), // a job takes its place when it is handed out (handOut)
		consumer.InstanceID(pl.instance)}
	life.build = func() (*consumer.Worker, error) {
		life.metrics.reset() // the metrics of the worker this one replaces
		o := opts
		if cfg.DataDir != "" {
			o = append(o, consumer.CheckpointDir(filepath.Join(cfg.DataDir, "pull")))
		} else {
			// A store of its own: restored from the changelogs, as at a
			// start of the server.
			o = append(o, consumer.CheckpointFS(vfs.NewMem()), consumer.CheckpointDir("pull"))
		}
		return consumer.New(o...)
	}
	w, err := life.build()
	if err != nil {
		return fmt.Errorf("starting the pull worker: %w", err)
	}
	if pl.adm, err = broker.NewAdmin(cfg.Conn); err != nil {
		return err
	}
	if cfg.Lane != "" {
		if err := pl.listLegacy(ctx); err != nil {
			return err
		}
	}
	pl.install(w)
	rctx, stop := context.WithCancel(context.Background())
	life.stop, life.done = stop, make(chan struct{})
	started := make(chan error, 1)
	go pl.run(rctx, w, started, cfg.Log.With("component", "pull"))
	go pl.countFleet(rctx, cfg.Group)
	if cfg.Lane != "" {
		go pl.watchLegacy(rctx, cfg.Log.With("component", "pull"))
	}
	go pl.reannounce(rctx)
	select {
	case err = <-started:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return pl.explainStart(err)
	}
	return nil
}

// explainStart explains why the first pull worker did not start.
func (pl *Pull) explainStart(err error) error {
	cfg := pl.cfg
	if !errors.Is(err, checkpoint.ErrMismatch) || cfg.DataDir == "" {
		return fmt.Errorf("serve: starting the pull worker: %w", err)
	}
	store := filepath.Join(cfg.DataDir, "pull", "store")
	owner, fix := "another pull group or Kafka cluster", "start with the pull group that used it (--pull-group)"
	if st, oerr := checkpoint.Open(store, checkpoint.ReadOnly()); oerr == nil {
		cluster, group := st.Identity()
		_ = st.Close()
		if group != cfg.Group {
			owner, fix = fmt.Sprintf("pull group %q", group), fmt.Sprintf("start with --pull-group %s", group)
		} else {
			owner, fix = fmt.Sprintf("the Kafka cluster %s", cluster), "start with the brokers of that cluster (--brokers)"
		}
	}
	return &startError{err: err, msg: fmt.Sprintf("serve: the data dir %s (--data-dir) keeps the pull worker checkpoint of %s, not of pull group %q: %s, or give pull group %q a data dir of its own",
		cfg.DataDir, owner, cfg.Group, fix, cfg.Group)}
}

// startError is an error of Start with a message of its own, which still
// matches what it wraps.
type startError struct {
	msg string
	err error
}

func (e *startError) Error() string { return e.msg }
func (e *startError) Unwrap() error { return e.err }

// install makes w the server's worker and tells it the wants it serves.
func (pl *Pull) install(w *consumer.Worker) {
	pl.w.Store(w)
	pl.wantAll(w)
}

// run runs w and, until ctx ends, a new worker in place of each one that
// stops, after a pause. started is told once w started, or why it did not:
// then run returns.
func (pl *Pull) run(ctx context.Context, w *consumer.Worker, started chan<- error, log *slog.Logger) {
	defer close(pl.life.done)
	pause := pullRestartMin
	for {
		began := time.Now()
		ran, err := pl.runOne(ctx, w, started)
		if started != nil && !ran || ctx.Err() != nil {
			return
		}
		started = nil
		if err == nil {
			err = errors.New("its Run returned") // without an error, while nothing stopped it
		}
		if time.Since(began) >= pullSteady {
			pause = pullRestartMin
		}
		pl.life.down.Store(&stopped{err: err, at: time.Now()})
		log.Error("the pull worker stopped: a new one starts after a pause", "err", err, "pause", pause)
		for w = nil; w == nil; {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, pullRestartMax)
			if w, err = pl.life.build(); err != nil {
				log.Error("a new pull worker could not be made: trying again after a pause", "err", err, "pause", pause)
			}
		}
		pl.install(w)
		pl.wantAcked(began.Add(-time.Minute))
	}
}

// wantAcked has the worker fetch, for AckRunWait, the queues of the tasks
// acknowledged since then (a minute before the stopped worker began,
// for the servers' clocks): a run that worker held when it stopped did
// not commit, and commits, with its acknowledged result, only once its
// queue is fetched again, which no consumer may ask for.
func (pl *Pull) wantAcked(since time.Time) {
	until := time.Now().Add(AckRunWait)
	for _, topic := range pl.ledger.ackedTopics(since) {
		pl.wantRemote(topic, until)
	}
}

// runOne runs w until it returns, and reports whether it started. started,
// unless nil, is told once it started, or why it did not.
func (pl *Pull) runOne(ctx context.Context, w *consumer.Worker, started chan<- error) (ran bool, err error) {
	ret := make(chan error, 1)
	go func() { ret <- w.Run(ctx) }()
	select {
	case <-w.Started():
		pl.life.down.Store(nil)
		if started != nil {
			started <- nil
		}
		return true, <-ret
	case err := <-ret:
		if started != nil {
			if err == nil {
				err = ctx.Err()
			}
			started <- err
		}
		return false, err
	}
}

// Healthy is nil while a pull worker runs and is healthy (consumer.Worker's
// Healthy); else it says why not.
func (pl *Pull) Healthy() error {
	if err := pl.notRunning(); err != nil {
		return err
	}
	if w := pl.w.Load(); w != nil {
		return w.Healthy()
	}
	return nil
}

// Ready is nil while a pull worker runs; else it says why not. It does
// not wait for the worker to join its group, as consumer.Worker's Ready
// does: a worker over a pattern joins once a queue exists, and a server
// must be ready to take the publish that makes the first one.
func (pl *Pull) Ready() error {
	if err := pl.notRunning(); err != nil {
		return err
	}
	w := pl.w.Load()
	if w == nil {
		return errors.New("the worker has not started yet")
	}
	select {
	case <-w.Started():
		return nil
	default:
		return errors.New("the worker has not started yet")
	}
}

// notRunning says why no pull worker runs now, if none does.
func (pl *Pull) notRunning() error {
	if d := pl.life.down.Load(); d != nil {
		return fmt.Errorf("the worker stopped %v ago, and a new one has not started yet: %w", time.Since(d.at).Round(time.Second), d.err)
	}
	return nil
}

// Stop stops the pull worker: tasks handed out and not acknowledged
// stay leased, and the group's next owner of their partitions waits for
// their acknowledgments.
func (pl *Pull) Stop() {
	close(pl.quit)
	if pl.life.stop == nil {
		return
	}
	pl.life.stop()
	<-pl.life.done
	pl.adm.Close()
}

// Close releases the leases and the limits, once the worker stopped.
func (pl *Pull) Close() {
	pl.ledger.close()
	pl.limits.Close()
}

// wantRemote makes the worker fetch topic until until: another server's
// consumers wait for it, and this one may own its partitions, or an
// acknowledgment waits for its task's run. The want is kept for the
// workers that start later: the lease topic is read, and its wants
// replayed, before the first one exists. It is a want of the queue's
// tasks (Queue.fetched), which go back to the queue only
// releaseAfter past it: a task fetched for it and sent back at once would
// be fetched again, a copy each time.
func (pl *Pull) wantRemote(topic string, until time.Time) {
	raiseTo(&pl.queue(topic).fetched, until)
	pl.mu.Lock()
	if until.After(pl.remote[topic]) {
		pl.remote[topic] = until
	}
	if len(pl.remote) > 2*pl.remoteSwept {
		now := time.Now()
		for t, u := range pl.remote {
			if !u.After(now) {
				delete(pl.remote, t)
			}
		}
		pl.remoteSwept = max(len(pl.remote), 64)
	}
	pl.mu.Unlock()
	// Read after the want was kept: a worker installed meanwhile is told
	// it here, or by wantAll.
	if w := pl.w.Load(); w != nil {
		pl.tell(w, topic, until)
	}
}

// wantAll tells w every want that lasts: of this server's consumers, and
// of the other servers'.
func (pl *Pull) wantAll(w *consumer.Worker) {
	now := time.Now()
	wants := map[string]time.Time{}
	pl.mu.Lock()
	for topic, q := range pl.queues {
		if u := q.wantedUntil(); u.After(now) {
			wants[topic] = u
		}
	}
	for topic, u := range pl.remote {
		switch {
		case !u.After(now):
			delete(pl.remote, topic)
		case u.After(wants[topic]):
			wants[topic] = u
		}
	}
	pl.mu.Unlock()
	for topic, u := range wants {
		pl.tell(w, topic, u)
	}
}

// fleetEvery is how often a server counts the members of its pull group.
const fleetEvery = 5 * time.Second

// countFleet counts the pull group's members every fleetEvery until ctx
// ends.
func (pl *Pull) countFleet(ctx context.Context, group string) {
	for {
		if n, err := pl.adm.GroupMembers(ctx, group); err == nil {
			pl.fleet.Store(int32(n))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(fleetEvery):
		}
	}
}

// workerMetrics registers the metrics of one pull worker at a time (a
// consumer.Worker registers its own, once): the worker that replaces one
// that stopped takes its predecessor's place in the registry.
type workerMetrics struct {
	prometheus.Registerer
	mu  sync.Mutex
	reg []prometheus.Collector
}

func (m *workerMetrics) Register(c prometheus.Collector) error {
	if err := m.Registerer.Register(c); err != nil {
		return err
	}
	m.mu.Lock()
	m.reg = append(m.reg, c)
	m.mu.Unlock()
	return nil
}

func (m *workerMetrics) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := m.Register(c); err != nil {
			panic(err)
		}
	}
}

// reset unregisters every collector registered so far.
func (m *workerMetrics) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.reg {
		m.Registerer.Unregister(c)
	}
	m.reg = nil
}
