package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/ops"
	"github.com/onceq/onceq/internal/sides"
)

type workerFlags struct {
	queues          []string
	group           string
	checkpointDir   string
	handler         string
	concurrency     int
	commitInterval  time.Duration
	maxPerCommit    int
	guarantee       string
	metricsAddr     string
	pprof           bool
	shutdownTimeout time.Duration
	timeout         time.Duration
	dedupWindow     time.Duration
	maxBuffered     int
	lookahead       int
	sessionTimeout  time.Duration
	txnTimeout      time.Duration
	retryPause      time.Duration
	maxAttempts     int
	backoffBase     time.Duration
	backoffFactor   float64
	backoffMax      time.Duration
	dropExpired     bool
	abandonGrace    time.Duration
	quietAfter      time.Duration
	metricsPerQueue bool
	delayService    bool
	workflowService bool
	scheduler       bool
	buckets         string
	crashAt         string
	groupProtocol   string
	faultDisk       string
	memoryLimit     string
	taskRecords     bool
	resultRetention time.Duration
	runningAfter    time.Duration
	maxResultBytes  int
}

func newWorkerCmd(g *globals) *cobra.Command {
	var f workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run tasks from queues exactly once, in a consumer group",
		Long: `Run tasks from queues in a consumer group. Start as many workers as you like with
the same --group: they share the queues' partitions. Each needs its own
--checkpoint-dir. Effects that go through onceq (emitted tasks, state, offsets)
commit exactly once across crashes and rebalances.

Handler kinds (--handler):
` + handlers.Kinds + `

It serves /metrics, /healthz and /readyz on --metrics-addr and stops cleanly on SIGINT or
SIGTERM: it stops fetching, lets in-flight tasks finish (up to
--shutdown-timeout), commits and leaves the group. Tasks still running then are
canceled and nothing of theirs is committed: they run again on restart, and the
exit code is 1.

Once the worker started, it runs the side services its flags ask for
(--delay-service, --workflow-service, --scheduler). One that stops (a state
directory under --checkpoint-dir it cannot write, a broker that refuses it)
stops the worker as SIGTERM does, and the command ends with exit code 1 and an
error naming it, for its supervisor to restart; /healthz and /readyz name it
meanwhile.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorker(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.queues, "queue", nil, "queues to run, Q[,Q2...] (required); a regular expression such as 'shop\\..*' runs every queue whose whole name matches, new ones included")
	fl.StringVar(&f.group, "group", consumer.DefaultGroup, "consumer group; workers of one group share the queues")
	fl.StringVar(&f.checkpointDir, "checkpoint-dir", "./onceq-data/worker", "this worker's checkpoint directory (one per worker process)")
	fl.StringVar(&f.handler, "handler", "", "what to run for each task (required): noop, copy:QUEUE, count:QUEUE, exec:COMMAND, http:URL")
	fl.IntVar(&f.concurrency, "concurrency", consumer.DefaultConcurrency, "handlers in flight; one key runs one at a time, in order")
	fl.DurationVar(&f.commitInterval, "commit-interval", consumer.DefaultCommitInterval, "how often completed tasks are committed")
	fl.IntVar(&f.maxPerCommit, "max-records-per-commit", consumer.DefaultMaxRecordsPerCommit, "commit early after this many completed tasks")
	fl.StringVar(&f.guarantee, "guarantee", string(consumer.DefaultGuarantee), "exactly-once or at-least-once (no transactions, no dedup)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "127.0.0.1:0", "serve /metrics, /healthz and /readyz here (port 0: any free port, logged; empty: off)")
	fl.BoolVar(&f.pprof, "pprof", false, "also serve Go's profiles on /debug/pprof/ of --metrics-addr, which must then be a loopback address")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", consumer.DefaultShutdownTimeout, "on shutdown, wait this long for in-flight tasks")
	fl.DurationVar(&f.timeout, "timeout", consumer.DefaultTaskTimeout, "time-to-run of tasks without onceq-timeout")
	fl.DurationVar(&f.dedupWindow, "dedup-window", consumer.DefaultDedupWindow, "how long processed task IDs are remembered")
	fl.IntVar(&f.maxBuffered, "max-buffered", consumer.DefaultMaxBufferedRecords, "records fetched and not yet committed, at most (bounds memory)")
	fl.IntVar(&f.lookahead, "priority-lookahead", consumer.DefaultPriorityLookahead, "records past --max-buffered a backlogged worker reads per partition, to start tasks of priority above 0 at once (0: off)")
	fl.DurationVar(&f.sessionTimeout, "session-timeout", consumer.DefaultSessionTimeout, "group session timeout: how long a silent worker keeps its partitions")
	fl.DurationVar(&f.txnTimeout, "transaction-timeout", consumer.DefaultTransactionTimeout, "transaction timeout, below --session-timeout")
	fl.DurationVar(&f.retryPause, "retry-pause", consumer.DefaultRetryPause, "pause before a task runs again after an infrastructure error (not a handler failure)")
	fl.IntVar(&f.maxAttempts, "max-attempts", consumer.DefaultMaxAttempts, "runs of a task without onceq-max-attempts before it is dead-lettered")
	fl.DurationVar(&f.backoffBase, "backoff-base", consumer.DefaultBackoffBase, "retry backoff of the first failure (tasks without onceq-backoff)")
	fl.Float64Var(&f.backoffFactor, "backoff-factor", consumer.DefaultBackoffFactor, "retry backoff growth per failure, 1 to 100")
	fl.DurationVar(&f.backoffMax, "backoff-max", consumer.DefaultBackoffMax, "longest retry backoff")
	fl.BoolVar(&f.dropExpired, "drop-expired", false, "drop tasks past onceq-expires instead of dead-lettering them")
	fl.DurationVar(&f.abandonGrace, "abandon-grace", consumer.DefaultAbandonGrace, "how long a handler may run past its time-to-run before it is abandoned")
	fl.BoolVar(&f.metricsPerQueue, "metrics-per-queue", consumer.DefaultMetricsPerQueue, "label the metrics with each queue (and partition); false sums them under \"*\", for workers of thousands of queues")
	fl.DurationVar(&f.quietAfter, "quiet-after", consumer.DefaultQuietAfter, "how long a partition goes without tasks before the worker stops fetching it until a task comes (at least 500ms)")
	fl.BoolVar(&f.taskRecords, "task-records", consumer.DefaultTaskRecords, "write each task's outcome and result to onceq-rec-QUEUE, for 'onceq task' to read")
	fl.DurationVar(&f.resultRetention, "result-retention", consumer.DefaultResultRetention, "how long task records keep results (0: states only)")
	fl.DurationVar(&f.runningAfter, "record-running-after", consumer.DefaultRecordRunningAfter, "how long a task runs before its record says running, with this worker and its start (100ms or more; 0: never)")
	fl.IntVar(&f.maxResultBytes, "max-result-bytes", consumer.DefaultMaxResultBytes, "largest result a task may return")
	fl.BoolVar(&f.delayService, "delay-service", true, "also run the delay service (moves delayed tasks and retries on); off when it runs apart (onceq delay)")
	fl.BoolVar(&f.workflowService, "workflow-service", true, "also run the workflow service (starts workflows, joins groups and chords); every worker may run one")
	fl.BoolVar(&f.scheduler, "scheduler", true, "also run the periodic scheduler (submits the ticks of 'onceq periodic' schedules); off when it runs apart (onceq periodic run)")
	bucketsFlag(fl, &f.buckets)
	fl.StringVar(&f.groupProtocol, "group-protocol", consumer.DefaultGroupProtocol, "classic (cooperative-sticky, static membership) or consumer (KIP-848, Kafka 4.0+), for the worker and the delay service beside it")
	fl.StringVar(&f.memoryLimit, "memory-limit", "192MiB", "soft limit of the Go heap and runtime (Go's GOMEMLIMIT, which wins when set): the garbage collector works harder near it; the checkpoint's cache (up to 96 MiB) comes on top; 0 for none")
	fl.StringVar(&f.crashAt, "crash-at", "", "fault injection: POINT:N kills this process (SIGKILL) at commit point POINT (before-kafka, between, after) of its Nth commit")
	_ = fl.MarkHidden("crash-at")
	fl.StringVar(&f.faultDisk, "fault-disk", "", "fault injection: OP:N fails the Nth write or sync (OP write or sync) of the checkpoint's write-ahead log, once")
	_ = fl.MarkHidden("fault-disk")
	setsOption(fl, "Queues", "queue")
	setsOption(fl, "WithHandler", "handler")
	setsOption(fl, "TaskTimeout", "timeout")
	setsOption(fl, "MaxBufferedRecords", "max-buffered")
	setsOption(fl, "PriorityLookahead", "priority-lookahead")
	setsOption(fl, "Backoff", "backoff-base", "backoff-factor", "backoff-max")
	return cmd
}

func runWorker(cmd *cobra.Command, g *globals, f workerFlags) error {
	ctx := cmd.Context()
	if len(f.queues) == 0 {
		return usagef("--queue is required: name the queue(s) to run, for example --queue emails")
	}
	for _, q := range f.queues {
		if consumer.IsPattern(q) {
			continue // checked by consumer.New, under --queue
		}
		if err := onceq.ValidateAnyQueue(q); err != nil {
			return usagef("--queue: %v", err)
		}
	}
	if f.handler == "" {
		return usagef("--handler is required; one of:\n%s", handlers.Kinds)
	}
	h, outputs, err := handlers.Parse(f.handler)
	var se *handlers.SpecError
	if errors.As(err, &se) {
		return usagef("--handler %q: %s", se.Spec, se.Reason)
	}
	if err != nil {
		return err
	}
	guarantee, err := consumer.ParseGuarantee(f.guarantee)
	if err != nil {
		return usagef("--guarantee: %v", err)
	}
	if f.pprof && f.metricsAddr == "" {
		return usagef("--pprof serves on --metrics-addr, which is empty: give both, for example --metrics-addr 127.0.0.1:9464 --pprof")
	}
	if f.pprof {
		if err := ops.CheckPprofAddr(f.metricsAddr); err != nil {
			return usagef("%v", err)
		}
	}
	conn, err := g.conn()
	if err != nil {
		return err
	}
	planner, err := parseBuckets(f.buckets)
	if err != nil {
		return err
	}
	hook, err := crashHook(f.crashAt)
	if err != nil {
		return err
	}
	diskFS, err := faultyDisk(f.faultDisk)
	if err != nil {
		return err
	}
	if err := setMemoryLimit(f.memoryLimit); err != nil {
		return err
	}
	reg := ops.NewRegistry()
	w, err := consumer.New(
		consumer.Conn(conn), consumer.Group(f.group), consumer.Queues(f.queues...), consumer.CheckpointDir(f.checkpointDir),
		consumer.WithHandler(h), consumer.Concurrency(f.concurrency), consumer.CommitInterval(f.commitInterval),
		consumer.MaxRecordsPerCommit(f.maxPerCommit), consumer.WithGuarantee(guarantee), consumer.ShutdownTimeout(f.shutdownTimeout),
		consumer.TaskTimeout(f.timeout), consumer.DedupWindow(f.dedupWindow), consumer.MaxBufferedRecords(f.maxBuffered), consumer.PriorityLookahead(f.lookahead),
		consumer.SessionTimeout(f.sessionTimeout), consumer.TransactionTimeout(f.txnTimeout), consumer.RetryPause(f.retryPause),
		consumer.MaxAttempts(f.maxAttempts), consumer.Backoff(f.backoffBase, f.backoffFactor, f.backoffMax),
		consumer.AbandonGrace(f.abandonGrace), consumer.QuietAfter(f.quietAfter), consumer.MetricsPerQueue(f.metricsPerQueue), consumer.Planner(planner), consumer.DropExpired(f.dropExpired), consumer.CommitHook(hook), consumer.GroupProtocol(f.groupProtocol),
		consumer.TaskRecords(f.taskRecords), consumer.ResultRetention(f.resultRetention), consumer.RecordRunningAfter(f.runningAfter), consumer.MaxResultBytes(f.maxResultBytes), consumer.CheckpointFS(diskFS), consumer.Registerer(reg), consumer.Logger(g.log),
	)
	if err != nil {
		return flagError(cmd.Flags(), err)
	}
	set, err := sides.New(sides.Config{Conn: conn, Planner: planner, Registerer: reg, Logger: g.log, Dir: f.checkpointDir,
		Delay: f.delayService, Workflow: f.workflowService, Scheduler: f.scheduler, GroupProtocol: f.groupProtocol})
	if err != nil {
		return flagError(cmd.Flags(), err)
	}
	if err := checkQueuesExist(ctx, conn, outputs); err != nil {
		return err
	}
	comps := []component{{"worker", w}}
	for _, svc := range set.Services() {
		comps = append(comps, component{svc.Name, svc})
	}
	stop, err := listenOps(f.metricsAddr, f.pprof, reg, g.log, comps...)
	if err != nil {
		return err
	}
	defer stop()
	// The side services start once the worker passed its own start, so
	// that a worker refused there (a bad changelog, a missing queue)
	// leaves nothing of theirs; one that stops ends the worker too.
	err = runTogether(ctx, w.Run, func(ctx context.Context) error { return set.Run(ctx, w.Started()) })
	if errors.Is(err, consumer.ErrTasksCanceled) {
		return fmt.Errorf("%w, nothing of theirs committed: they run again on restart, or on the worker of group %q "+
			"that takes their partitions (a longer --shutdown-timeout lets them finish)", err, f.group)
	}
	return err
}

// component is a long-running part of a command: what it runs, and how
// healthy it is.
type component struct {
	name string
	svc  sides.Runner
}

// listenOps serves /metrics, /healthz and /readyz of the components on
// addr, unless addr is empty; stop closes the server.
func listenOps(addr string, withPprof bool, reg *prometheus.Registry, log *slog.Logger, cs ...component) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	health := &ops.Health{}
	for _, c := range cs {
		health.Register(c.name, c.svc)
	}
	srv, err := ops.Listen(addr, reg, health, log, withPprof)
	if err != nil {
		return nil, err
	}
	return srv.Close, nil
}

// runTogether runs services (the worker, and its side services as one
// sides.Set) until all stop; the first to stop stops the others.
func runTogether(ctx context.Context, services ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(services))
	for _, run := range services {
		go func() { errs <- run(ctx) }()
	}
	all := make([]error, 0, len(services))
	for range services {
		all = append(all, <-errs)
		cancel()
	}
	return errors.Join(all...)
}
