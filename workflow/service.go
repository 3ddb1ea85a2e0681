package workflow

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/flow"
)

// Service is the workflow service: a worker of onceq.WorkflowQueue, in a
// consumer group of its own, that starts submitted workflows (once their
// dependencies succeeded) and joins groups. Everything it does is a task's
// outcome in that worker, so it commits exactly once with the state it
// keeps (a join's members reported so far) and the tasks it emits. Run
// one or more anywhere (onceq worker runs one by default); they share the
// queue's partitions like any workers of a group.
type Service struct {
	cfg config
	w   *consumer.Worker
	m   serviceMetrics

	inMu   sync.Mutex
	in     *inspect.Inspector // of the dependencies' queues, opened when first needed
	adm    *broker.Admin      // connected when first needed
	queues sync.Map           // queue -> struct{}: the queues known to exist
}

// NewService checks the options and builds a service; Run starts it.
func NewService(opts ...Opt) (*Service, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg}
	if s.m, err = newServiceMetrics(cfg.reg); err != nil {
		return nil, err
	}
	wopts := []consumer.Opt{consumer.Conn(cfg.conn), consumer.Group(cfg.group), consumer.Queues(onceq.WorkflowQueue),
		consumer.CheckpointDir(filepath.Join(cfg.dir, "worker")), consumer.WithHandler(consumer.HandlerFunc(s.handle)),
		consumer.Logger(cfg.log), consumer.CommitInterval(cfg.commitInterval), consumer.Concurrency(cfg.concurrency),
		consumer.MaxResultBytes(MaxDefinitionBytes), consumer.ResultRetention(cfg.retention)}
	if cfg.planner != nil {
		wopts = append(wopts, consumer.Planner(cfg.planner))
	}
	if cfg.dir == "" {
		wopts = append(wopts, consumer.CheckpointFS(vfs.NewMem()))
	}
	if s.w, err = consumer.New(append(wopts, cfg.workerOpts...)...); err != nil {
		return nil, fmt.Errorf("workflow: %w", err)
	}
	return s, nil
}

// Run runs the service until ctx is done, then stops as a worker does.
func (s *Service) Run(ctx context.Context) error {
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return err
	}
	_, err = adm.EnsureTopics(ctx, []broker.TopicSpec{broker.WorkflowSpec()})
	adm.Close()
	if err != nil {
		return fmt.Errorf("workflow: creating %s: %w", onceq.WorkflowQueue, err)
	}
	defer func() {
		s.inMu.Lock()
		defer s.inMu.Unlock()
		if s.in != nil {
			s.in.Close()
		}
		if s.adm != nil {
			s.adm.Close()
		}
	}()
	return s.w.Run(ctx)
}

// Healthy reports whether the service's worker is healthy.
func (s *Service) Healthy() error { return s.w.Healthy() }

// Ready reports whether the service's worker is ready.
func (s *Service) Ready() error { return s.w.Ready() }

// handle runs a task of the workflow queue: a workflow to start, or a
// member's report to its join.
func (s *Service) handle(ctx context.Context, t *consumer.Task) error {
	m, err := flow.DecodeMessage(t.Payload)
	if err != nil {
		return consumer.SkipRetry(fmt.Errorf("workflow: task %s of %s: %w", t.ID, onceq.WorkflowQueue, err))
	}
	if m.Start != nil {
		return s.start(ctx, t, m.Start)
	}
	return s.join(t, m.Report)
}

// start emits a workflow's first tasks, once its dependencies succeeded,
// and keeps the workflow's shape as the start task's result (what Get
// reads). A dependency that failed cancels the first tasks instead, which
// fails the workflow through its own steps.
func (s *Service) start(ctx context.Context, t *consumer.Task, def *flow.Definition) error {
	var cancel string
	if len(def.After) > 0 {
		var waiting string
		var err error
		if cancel, waiting, err = s.dependencies(ctx, def.After); err != nil {
			return err
		}
		if waiting != "" {
			in, err := s.inspector()
			if err != nil {
				return err
			}
			cycle, err := dependencyCycle(ctx, in, def)
			if err != nil {
				return err
			}
			if cycle != "" {
				// Nothing of it ever starts: it ends, through its
				// first tasks, with the cycle as their reason.
				cancel, waiting = "dependency cycle: "+cycle, ""
			}
		}
		if waiting != "" {
			// Its shape shows while it waits (what Get shows, and what a
			// namespace's reader is checked against).
			if err := setShape(t, def); err != nil {
				return err
			}
			return consumer.Snooze(dependencyCheck(t.Attempt), "waiting for "+waiting)
		}
	}
	if err := s.checkQueues(ctx, def); err != nil {
		return err
	}
	tasks, err := flow.Start(def.W, &def.Root, nil, nil)
	if err != nil {
		return consumer.SkipRetry(fmt.Errorf("workflow %s: %w", def.W, err))
	}
	for i := range tasks {
		tasks[i].Cancel = cancel
		if err := t.Emit(tasks[i]); err != nil {
			return consumer.SkipRetry(fmt.Errorf("workflow %s: %w", def.W, err))
		}
	}
	s.m.started.Inc()
	return setShape(t, def)
}

// setShape keeps the workflow's shape as the start task's result.
func setShape(t *consumer.Task, def *flow.Definition) error {
	shape, err := shapeOf(def)
	if err != nil {
		return consumer.SkipRetry(err)
	}
	return t.SetResult(shape)
}

// checkQueues fails a workflow that names a queue that does not exist,
// before it starts: a step emitted to one could never be written, and
// would hold its emitter's slot.
func (s *Service) checkQueues(ctx context.Context, def *flow.Definition) error {
	for _, q := range queuesOf(&def.Root, nil) {
		if _, ok := s.queues.Load(q); ok {
			continue
		}
		adm, err := s.admin()
		if err != nil {
			return err
		}
		topic := onceq.QueueTopic(q) // a lane queue's lane
		_, err = adm.DescribeTopic(ctx, topic)
		if errors.Is(err, broker.ErrTopicNotFound) {
			err = s.confirmMissing(ctx, topic)
		}
		switch {
		case errors.Is(err, broker.ErrTopicNotFound):
			return consumer.SkipRetry(fmt.Errorf("workflow %s: queue %q does not exist: create it with 'onceq topics create %s', then retry the workflow with 'onceq workflow retry %s'", def.W, q, topic, def.W))
		case err != nil:
			return err
		}
		s.queues.Store(q, struct{}{})
	}
	return nil
}

// queuesOf appends the queues of node n's tasks to qs, each once.
func queuesOf(n *flow.Node, qs []string) []string {
	if n.Task != nil && !slices.Contains(qs, n.Task.Queue) {
		qs = append(qs, n.Task.Queue)
	}
	for _, ns := range [][]flow.Node{n.Chain, n.Group, n.OnSuccess, n.OnError} {
		for i := range ns {
			qs = queuesOf(&ns[i], qs)
		}
	}
	if n.Callback != nil {
		qs = queuesOf(n.Callback, qs)
	}
	return qs
}

// admin returns the service's admin client, connecting it the first time.
func (s *Service) admin() (*broker.Admin, error) {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	if s.adm == nil {
		adm, err := broker.NewAdmin(s.cfg.conn)
		if err != nil {
			return nil, err
		}
		s.adm = adm
	}
	return s.adm, nil
}

// confirmMissing asks the brokers again, through a client of its own,
// whether queue q exists: the service's client answers from metadata it
// keeps for a few seconds, and a workflow retried once its queue was
// created must not fail again on that answer.
func (s *Service) confirmMissing(ctx context.Context, q string) error {
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	_, err = adm.DescribeTopic(ctx, q)
	return err
}

// dependencyCheck is how long a workflow waits before it looks at its
// dependencies again: 250ms, doubling to at most 5s.
func dependencyCheck(attempt int) time.Duration {
	return min(250*time.Millisecond<<min(max(attempt-1, 0), 5), 5*time.Second)
}

// dependencies looks up each dependency's task record: cancel says why
// the workflow must not start (one failed for good), waiting names one
// that has not succeeded yet.
func (s *Service) dependencies(ctx context.Context, after []flow.Ref) (cancel, waiting string, err error) {
	in, err := s.inspector()
	if err != nil {
		return "", "", err
	}
	for _, d := range after {
		rec, err := in.Get(ctx, d.Queue, d.ID)
		switch {
		case errors.Is(err, inspect.ErrNotFound), errors.Is(err, inspect.ErrNoQueue):
			why, err := neverRuns(ctx, in, d)
			if err != nil {
				return "", "", fmt.Errorf("workflow: dependency %s: %w", d, err)
			}
			if why != "" {
				return "dependency " + d.String() + " never runs: " + why, "", nil
			}
			if waiting == "" {
				waiting = d.String() + " (no record yet)"
			}
		case err != nil:
			return "", "", fmt.Errorf("workflow: dependency %s: %w", d, err)
		case rec.State == onceq.StateSucceeded:
		case rec.State.Final():
			why := "dependency " + d.String() + " ended " + string(rec.State)
			if rec.Reason != "" {
				why += ": " + rec.Reason
			}
			if rec.Error != "" {
				why += ": " + rec.Error
			}
			return why, "", nil
		case waiting == "":
			waiting = d.String() + " (" + string(rec.State) + ")"
		}
	}
	return "", waiting, nil
}

// inspector opens the view of the dependencies' task records the first
// time a workflow has dependencies.
func (s *Service) inspector() (*inspect.Inspector, error) {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	if s.in != nil {
		return s.in, nil
	}
	opts := []inspect.Opt{inspect.Conn(s.cfg.conn), inspect.Logger(s.cfg.log), inspect.Retention(s.cfg.retention)}
	if s.cfg.dir != "" {
		opts = append(opts, inspect.Dir(filepath.Join(s.cfg.dir, "dependencies")))
	}
	in, err := inspect.Open(opts...)
	if err != nil {
		return nil, fmt.Errorf("workflow: opening the view of dependencies: %w", err)
	}
	s.in = in
	return in, nil
}

// join counts a member's report in its join's state, keyed by the join
// (every report of one join is keyed by it, so they run one at a time, in
// one partition): the members' outputs so far, and how many reported.
// When the last one reports it continues the frames below the join with
// the group's output; at the first failure it continues them with the
// failure. A report seen before (a member that ran twice under
// at-least-once) counts once.
func (s *Service) join(t *consumer.Task, r *flow.Report) error {
	st := t.State()
	base := "j/" + r.Join.ID
	member := []byte(base + "/" + strconv.Itoa(r.Join.I))
	if _, seen, err := st.Get(member); err != nil || seen {
		return err
	}
	h, err := loadJoin(st, base, r.Join.N)
	if err != nil {
		return consumer.SkipRetry(err)
	}
	h.seen++
	if r.OK {
		st.Set(member, append([]byte{'s'}, r.Output...))
	} else {
		st.Set(member, []byte{'f'})
	}
	var next []onceq.Task
	if !r.OK && !h.failed {
		h.failed = true
		if next, err = flow.Finish(r.W, r.Rest, flow.Outcome{Fail: r.Fail}); err != nil {
			return consumer.SkipRetry(err)
		}
		s.m.joins.WithLabelValues("failed").Inc()
	}
	if h.seen < h.n {
		st.Set([]byte(base), h.encode())
	} else {
		outputs := make([][]byte, h.n)
		for i := range outputs {
			k := []byte(base + "/" + strconv.Itoa(i))
			v, _, err := st.Get(k)
			if err != nil {
				return err
			}
			if len(v) > 0 && v[0] == 's' {
				outputs[i] = v[1:]
			}
			st.Delete(k)
		}
		st.Delete([]byte(base))
		if !h.failed {
			if next, err = flow.Finish(r.W, r.Rest, flow.Succeeded(flow.GroupOutput(outputs))); err != nil {
				return consumer.SkipRetry(err)
			}
			s.m.joins.WithLabelValues("succeeded").Inc()
		}
	}
	for i := range next {
		if err := t.Emit(next[i]); err != nil {
			return consumer.SkipRetry(fmt.Errorf("workflow %s: join %s: %w", r.W, r.Join.ID, err))
		}
	}
	return nil
}

// joinState is what a join keeps beside its members' outputs.
type joinState struct {
	n, seen int
	failed  bool
}

func loadJoin(st *consumer.State, key string, n int) (joinState, error) {
	v, ok, err := st.Get([]byte(key))
	if err != nil || !ok {
		return joinState{n: n}, err
	}
	var h joinState
	var failed int
	if _, err := fmt.Sscanf(string(v), "%d %d %d", &h.n, &h.seen, &failed); err != nil || h.n != n {
		return h, fmt.Errorf("workflow: join %s: state %q does not fit a group of %d", key, v, n)
	}
	h.failed = failed == 1
	return h, nil
}

func (h joinState) encode() []byte {
	f := 0
	if h.failed {
		f = 1
	}
	return fmt.Appendf(nil, "%d %d %d", h.n, h.seen, f)
}

type serviceMetrics struct {
	started prometheus.Counter
	joins   *prometheus.CounterVec
}

func newServiceMetrics(reg prometheus.Registerer) (serviceMetrics, error) {
	m := serviceMetrics{
		started: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_workflows_started_total",
			Help: "Workflows the workflow service started (their first tasks emitted)."}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_workflow_joins_total",
			Help: "Groups joined by the workflow service, by outcome (succeeded: every member did; failed: at the first member that failed)."}, []string{"outcome"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.started, m.joins} {
			if err := reg.Register(c); err != nil {
				return m, fmt.Errorf("workflow: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}
