package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/delay"
)

// Guarantee is what a worker promises about a task's effects.
type Guarantee string

const (
	// ExactlyOnce commits each task's effects, its offset and its
	// processed-ID mark in one Kafka transaction, and skips IDs already
	// processed. The default.
	ExactlyOnce Guarantee = "exactly-once"
	// AtLeastOnce turns off transactions and deduplication for raw speed:
	// after a crash, tasks since the last commit run again and their
	// effects are written again.
	AtLeastOnce Guarantee = "at-least-once"
)

// ParseGuarantee reads a guarantee by name.
func ParseGuarantee(s string) (Guarantee, error) {
	switch g := Guarantee(s); g {
	case ExactlyOnce, AtLeastOnce:
		return g, nil
	}
	return "", fmt.Errorf("consumer: guarantee %q: use exactly-once or at-least-once", s)
}

// ErrConfig is wrapped by every option New refuses; each is an
// *onceq.OptionError naming the option.
var ErrConfig = errors.New("invalid worker option")

// Defaults of the options.
const (
	DefaultGroup               = "onceq"
	DefaultConcurrency         = 32
	DefaultCommitInterval      = 100 * time.Millisecond
	DefaultMaxRecordsPerCommit = 20_000
	DefaultDedupWindow         = checkpoint.DefaultDedupWindow
	DefaultMaxBufferedRecords  = 30_000
	DefaultPriorityLookahead   = 250_000
	DefaultTaskTimeout         = 30 * time.Second
	DefaultGuarantee           = ExactlyOnce
	DefaultSessionTimeout      = 10 * time.Second
	DefaultTransactionTimeout  = 8 * time.Second
	DefaultShutdownTimeout     = 30 * time.Second
	DefaultRetryPause          = time.Second
	DefaultMaxAttempts         = 5
	DefaultBackoffBase         = time.Second
	DefaultBackoffFactor       = 2.0
	DefaultBackoffMax          = time.Hour
	DefaultJitter              = 0.2
	DefaultAbandonGrace        = 5 * time.Second
	DefaultGroupProtocol       = ClassicGroup
	DefaultTaskRecords         = true
	DefaultResultRetention     = DefaultDedupWindow
	DefaultRecordRunningAfter  = time.Second
	DefaultMaxResultBytes      = 64 << 10
	DefaultOnDemandLine        = 1000
)

// An Opt configures a Worker. Options are applied in order over the
// defaults; New checks the result once and reports every refused option.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	conn            broker.Conn
	group           string
	queues          []string
	checkpointDir   string
	handler         Handler
	concurrency     int
	commitInterval  time.Duration
	maxPerCommit    int
	dedupWindow     time.Duration
	maxBuffered     int
	lookahead       int
	taskTimeout     time.Duration
	guarantee       Guarantee
	registerer      prometheus.Registerer
	log             *slog.Logger
	instanceID      string
	sessionTimeout  time.Duration
	txnTimeout      time.Duration
	shutdownTimeout time.Duration
	retryPause      time.Duration
	maxAttempts     int
	backoff         onceq.Backoff
	jitter          float64
	dropExpired     bool
	abandonGrace    time.Duration
	commitHook      func(CommitPoint)
	groupProtocol   string
	checkpointFS    vfs.FS
	planner         *delay.Planner
	maxMessageBytes int
	noSync          bool
	taskRecords     bool
	resultRetention time.Duration
	runningAfter    time.Duration
	maxResultBytes  int
	quietAfter      time.Duration
	metricsPerQueue bool
	onDemand        bool
	onDemandLine    int
	maxPerQueue     int
	ownLimits       bool
	// now is the clock of the time-driven rules it serves: the expiry of
	// processed IDs past the dedup window. time.Now but in tests.
	now func() time.Time
}

func defaults() config {
	return config{
		conn:            broker.Conn{Brokers: []string{broker.DefaultBrokers}},
		group:           DefaultGroup,
		concurrency:     DefaultConcurrency,
		onDemandLine:    DefaultOnDemandLine,
		commitInterval:  DefaultCommitInterval,
		maxPerCommit:    DefaultMaxRecordsPerCommit,
		dedupWindow:     DefaultDedupWindow,
		maxBuffered:     DefaultMaxBufferedRecords,
		lookahead:       DefaultPriorityLookahead,
		taskTimeout:     DefaultTaskTimeout,
		guarantee:       DefaultGuarantee,
		sessionTimeout:  DefaultSessionTimeout,
		txnTimeout:      DefaultTransactionTimeout,
		shutdownTimeout: DefaultShutdownTimeout,
		retryPause:      DefaultRetryPause,
		maxAttempts:     DefaultMaxAttempts,
		backoff:         onceq.Backoff{Base: DefaultBackoffBase, Factor: DefaultBackoffFactor, Max: DefaultBackoffMax},
		jitter:          DefaultJitter,
		abandonGrace:    DefaultAbandonGrace,
		groupProtocol:   DefaultGroupProtocol,
		now:             time.Now,
		maxMessageBytes: onceq.DefaultMaxMessageBytes,
		taskRecords:     DefaultTaskRecords,
		resultRetention: DefaultResultRetention,
		runningAfter:    DefaultRecordRunningAfter,
		maxResultBytes:  DefaultMaxResultBytes,
		quietAfter:      DefaultQuietAfter,
		metricsPerQueue: DefaultMetricsPerQueue,
		log:             slog.New(slog.DiscardHandler),
	}
}

// Conn sets how to reach the brokers. Default: 127.0.0.1:9092, plaintext.
func Conn(c broker.Conn) Opt { return optFunc(func(cfg *config) { cfg.conn = c }) }

// Group sets the consumer group. Workers of one group share the queues'
// partitions. Default DefaultGroup ("onceq"). Under ExactlyOnce the group and each queue
// name the queue's changelog topic (broker.ChangelogTopic), which must fit
// Kafka's limit of 249 bytes on topic names: New refuses a group and queue
// longer than about 227 bytes together (broker.ValidateChangelog).
func Group(g string) Opt { return optFunc(func(c *config) { c.group = g }) }

// Queues sets the queues to run. Required. An argument holding a character
// no queue name may hold (`*`, `+`, `?`, `[`, `(`, `|`, `^`, `$`, `\`, `{`)
// is a pattern, a regular expression in Go's syntax that whole queue names
// must match (`shop\..*`, `tenant-[0-9]+`): the worker consumes every queue
// that matches, picks up new ones while it runs (at once when their first
// task's wake-up names them, otherwise within 10 s), and never matches
// onceq's own topics. A '.' is a name's character, so `shop.orders` names
// one queue.
func Queues(qs ...string) Opt {
	return optFunc(func(c *config) { c.queues = append([]string{}, qs...) })
}

// CheckpointDir sets the worker's directory: its Pebble checkpoint (in
// store/) and its instance ID (in instance-id). Required. Each worker
// process needs its own.
func CheckpointDir(dir string) Opt { return optFunc(func(c *config) { c.checkpointDir = dir }) }

// WithHandler sets the handler. Required.
func WithHandler(h Handler) Opt { return optFunc(func(c *config) { c.handler = h }) }

// Concurrency bounds the handlers in flight. Records with the same key run
// one at a time in offset order; different keys run concurrently. Default
// DefaultConcurrency (32).
func Concurrency(n int) Opt { return optFunc(func(c *config) { c.concurrency = n }) }

// CommitInterval is how often completed tasks are committed. Shorter
// lowers latency to visibility and the work redone after a crash; longer
// raises throughput. Default DefaultCommitInterval (100ms).
func CommitInterval(d time.Duration) Opt { return optFunc(func(c *config) { c.commitInterval = d }) }

// MaxRecordsPerCommit commits early once this many tasks completed.
// Default DefaultMaxRecordsPerCommit (20,000).
func MaxRecordsPerCommit(n int) Opt { return optFunc(func(c *config) { c.maxPerCommit = n }) }

// DedupWindow is how long processed IDs are remembered. A duplicate
// submitted later than this after the original runs again. Default
// DefaultDedupWindow (7 days).
func DedupWindow(d time.Duration) Opt { return optFunc(func(c *config) { c.dedupWindow = d }) }

// MaxBufferedRecords bounds the records fetched but not yet committed, and
// so the worker's memory. It must be at least Concurrency. Default
// DefaultMaxBufferedRecords (30,000).
func MaxBufferedRecords(n int) Opt { return optFunc(func(c *config) { c.maxBuffered = n }) }

// PriorityLookahead is how many records past its fetch position a worker
// reads a partition that lags by a backlog, to start at once the tasks of
// a priority above 0 it finds there: behind a backlog longer than
// MaxBufferedRecords, they would otherwise wait for the worker to fetch
// up to them. A record whose key or ID an earlier record not yet run
// holds still waits for it. It costs a second read of the backlog and the
// keys of the records passed over (at most 1,000,000 per worker). 0 turns
// it off. Under AtLeastOnce, a task run ahead that the worker loses before
// its fetch reaches it (a crash, a rebalance) runs again. Default
// DefaultPriorityLookahead (250,000).
func PriorityLookahead(n int) Opt { return optFunc(func(c *config) { c.lookahead = n }) }

// TaskTimeout is the time-to-run of a task without onceq-timeout: its
// handler's context is canceled after it. Default DefaultTaskTimeout (30s).
func TaskTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.taskTimeout = d }) }

// WithGuarantee sets ExactlyOnce or AtLeastOnce. Default DefaultGuarantee
// (ExactlyOnce).
func WithGuarantee(g Guarantee) Opt { return optFunc(func(c *config) { c.guarantee = g }) }

// Registerer registers the worker's metrics. Default: none.
func Registerer(r prometheus.Registerer) Opt { return optFunc(func(c *config) { c.registerer = r }) }

// Logger sets the logger. Default: discard.
func Logger(l *slog.Logger) Opt { return optFunc(func(c *config) { c.log = l }) }

// InstanceID fixes the worker's instance ID, from which its transactional
// ID and static group membership derive. Default: created on first start
// and kept in the checkpoint dir, so a restarted worker fences its
// predecessor's open transaction at once and takes back its partitions
// without a rebalance.
func InstanceID(id string) Opt { return optFunc(func(c *config) { c.instanceID = id }) }

// SessionTimeout is the group session timeout: how long a silent worker
// keeps its partitions. Default DefaultSessionTimeout (10s).
func SessionTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.sessionTimeout = d }) }

// TransactionTimeout bounds an open transaction; the broker aborts it
// after that. It must be below SessionTimeout. Default
// DefaultTransactionTimeout (8s).
func TransactionTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.txnTimeout = d }) }

// ShutdownTimeout bounds the wait for in-flight handlers on shutdown;
// handlers still running after it are abandoned and their tasks run again
// elsewhere. Default DefaultShutdownTimeout (30s).
func ShutdownTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.shutdownTimeout = d }) }

// RetryPause is the wait before a task runs again in place after an
// infrastructure error (the checkpoint or the brokers failed, not the
// handler). Default DefaultRetryPause (1s).
func RetryPause(d time.Duration) Opt { return optFunc(func(c *config) { c.retryPause = d }) }

// MaxAttempts is how many times a task without onceq-max-attempts runs
// before it goes to its dead letters. Default DefaultMaxAttempts (5).
func MaxAttempts(n int) Opt { return optFunc(func(c *config) { c.maxAttempts = n }) }

// Backoff sets the retry backoff of tasks without onceq-backoff: attempt n
// waits base*factor^(n-1), at most max, plus jitter. Default
// DefaultBackoffBase, DefaultBackoffFactor, DefaultBackoffMax (1s, 2, 1h).
func Backoff(base time.Duration, factor float64, maxDelay time.Duration) Opt {
	return optFunc(func(c *config) { c.backoff = onceq.Backoff{Base: base, Factor: factor, Max: maxDelay} })
}

// Jitter adds up to this fraction of the backoff, at random, so that
// tasks that failed together do not retry together. It only adds: a retry
// never comes before its backoff. Default DefaultJitter (0.2).
func Jitter(f float64) Opt { return optFunc(func(c *config) { c.jitter = f }) }

// DropExpired, when true, drops tasks past onceq-expires (counted as
// outcome "expired") instead of dead-lettering them with reason "expired".
// Default false.
func DropExpired(drop bool) Opt { return optFunc(func(c *config) { c.dropExpired = drop }) }

// AbandonGrace is how long a handler may run past its time-to-run, with
// its context canceled, before the worker stops waiting for it: its result
// is then discarded, the run counts as a retryable failure and
// onceq_abandoned_handlers counts it. Default DefaultAbandonGrace (5s).
func AbandonGrace(d time.Duration) Opt { return optFunc(func(c *config) { c.abandonGrace = d }) }

// Planner sets the delay ladder the worker expects for the delayed tasks
// it emits and retries. Run routes by the cluster's ladder
// (delay.ClusterPlanner): it refuses to start when that differs, and sets
// it on a cluster whose ladder was never set. Default: the cluster's
// ladder, delay.DefaultBuckets when none was set.
func Planner(p *delay.Planner) Opt { return optFunc(func(c *config) { c.planner = p }) }

// MaxMessageBytes is the largest record the brokers accept. Default
// onceq.DefaultMaxMessageBytes (1 MiB).
func MaxMessageBytes(n int) Opt { return optFunc(func(c *config) { c.maxMessageBytes = n }) }

// NoSync stops syncing the checkpoint on every commit. The changelog is
// then the only durable copy: a crash costs a longer restore. Default off.
func NoSync() Opt { return optFunc(func(c *config) { c.noSync = true }) }

// CheckpointFS sets the filesystem of the checkpoint store. Default: the
// operating system's. The disk-fault tests pass one that injects errors.
func CheckpointFS(fs vfs.FS) Opt { return optFunc(func(c *config) { c.checkpointFS = fs }) }

// Group protocols.
const (
	// ClassicGroup is the client-driven group protocol with the
	// cooperative-sticky balancer: a rebalance moves only the partitions
	// that change owner.
	ClassicGroup = broker.ClassicGroup
	// ConsumerGroup is KIP-848's protocol, where the broker assigns the
	// partitions (Kafka 4.0+; 4.3+ recommended).
	ConsumerGroup = broker.ConsumerGroup
)

// GroupProtocol selects ClassicGroup or ConsumerGroup. Default
// DefaultGroupProtocol (ClassicGroup). With
// ClassicGroup a worker is a static member (its instance ID): a restart
// takes its partitions back without a rebalance. With ConsumerGroup it is a
// dynamic member: a clean stop hands its partitions over at once, a crashed
// worker's move after the broker's group.consumer.session.timeout.ms.
func GroupProtocol(p string) Opt { return optFunc(func(c *config) { c.groupProtocol = p }) }

// CommitPoint is a step of the commit cycle, for fault injection.
type CommitPoint int

// The points of the commit cycle a hook sees.
const (
	BeforeKafkaCommit CommitPoint = iota // outputs and offsets collected, transaction not begun
	BetweenCommits                       // the Kafka transaction committed, the checkpoint not written
	AfterCommits                         // both committed
)

func (p CommitPoint) String() string {
	switch p {
	case BeforeKafkaCommit:
		return "before-kafka"
	case BetweenCommits:
		return "between"
	case AfterCommits:
		return "after"
	}
	return "CommitPoint(" + strconv.Itoa(int(p)) + ")"
}

// ParseCommitPoint reads a commit point by its String name.
func ParseCommitPoint(s string) (CommitPoint, error) {
	for p := BeforeKafkaCommit; p <= AfterCommits; p++ {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("consumer: commit point %q: use before-kafka, between or after", s)
}

// TaskRecords turns the task records on or off: with them, each outcome
// (succeeded with its result, retrying, dead, expired, canceled, scheduled)
// is written to its queue's records topic (broker.RecordsTopic) in the
// transaction of the outcome, one Kafka record per queue partition per
// commit, for package inspect and the CLI's task commands to read.
// Default DefaultTaskRecords (on).
func TaskRecords(on bool) Opt { return optFunc(func(c *config) { c.taskRecords = on }) }

// RecordRunningAfter sets how long a handler runs before the worker
// records its task running (onceq.StateRunning, with the worker and the
// start time), in the next commit's transaction, so that readers see the
// slow runs in progress; the run's outcome is recorded over it. Shorter
// runs are never recorded running, and cost nothing. 0 records no run
// in progress. Default DefaultRecordRunningAfter (1s); at least
// 100ms. It needs TaskRecords.
func RecordRunningAfter(d time.Duration) Opt {
	return optFunc(func(c *config) { c.runningAfter = d })
}

// ResultRetention sets how long task records keep their results: the
// records topic keeps records this long (its retention.ms, the dedup
// window if that is longer: set when the worker creates the topic, and
// raised at start where the topic keeps them for less). 0 keeps no
// results, only the states, for the dedup window. Default
// DefaultResultRetention (the dedup window, 7 days).
func ResultRetention(d time.Duration) Opt { return optFunc(func(c *config) { c.resultRetention = d }) }

// MaxResultBytes bounds a result (Task.SetResult). Default
// DefaultMaxResultBytes (64 KiB); at most the largest record less room
// for the record's other fields.
func MaxResultBytes(n int) Opt { return optFunc(func(c *config) { c.maxResultBytes = n }) }

// QuietAfter is how long a partition goes without records or wake-ups
// before the worker may stop fetching it until a wake-up or a new record
// (see quiet.go): what lets one worker follow thousands of queues. Default
// DefaultQuietAfter (2s); at least twice broker.WakeEvery.
func QuietAfter(d time.Duration) Opt { return optFunc(func(c *config) { c.quietAfter = d }) }

// DefaultMetricsPerQueue says that a worker's metrics carry each queue's
// name (and partition) by default.
const DefaultMetricsPerQueue = true

// MetricsPerQueue says whether the worker's metrics have a series per
// queue (and per partition, for lag and open records). A series is per
// topic: the lane queues of a lane share the lane's series, so a lane of
// any number of labels costs the series of one queue (their tasks by
// state are in the read side: onceq queue stats). Off, every series has
// queue (and partition) "*", summed over the queues: a worker of
// thousands of topics keeps its series to a few dozen. Default
// DefaultMetricsPerQueue (on).
func MetricsPerQueue(on bool) Opt { return optFunc(func(c *config) { c.metricsPerQueue = on }) }

// OnDemand, when on, makes the worker fetch a queue's partitions only
// while the queue is wanted (Worker.Want): a worker over every queue of a
// server whose handler hands each task to a client that asked for its
// queue (onceq serve) fetches nothing nobody waits for. A queue's
// partitions, those assigned later included, start unfetched; the first
// Want resumes them at once, and within 50 ms of the want's end they are
// no longer fetched. Tasks fetched by then still run. A partition is
// fetched only if it is not quiet (QuietAfter) and not paused in the
// control topic either; a wake-up of a queue not wanted does not fetch
// it. A partition restores from its changelog on its first record, as
// always: a queue's first Want may wait for that. Default off: every
// partition is fetched unless quiet or paused.
//
// A lane queue's partitions are its lane's: the lane is fetched while any
// of its lane queues is wanted, and the tasks of its lane queues nobody
// wants wait outside the slots (OnDemandLine), until a Want of their
// queue starts them.
func OnDemand(on bool) Opt { return optFunc(func(c *config) { c.onDemand = on }) }

// OnDemandLine bounds the tasks of one lane queue nobody wants (OnDemand)
// that wait, outside the slots and in key order, for a Want of it; all of
// them together stay within half of MaxBufferedRecords. Past the bound,
// its tasks start as they come, and the handler decides what to do with
// them (onceq serve snoozes them back to their lane for a while); 0
// starts them all so. Default DefaultOnDemandLine (1,000).
func OnDemandLine(n int) Opt { return optFunc(func(c *config) { c.onDemandLine = n }) }

// MaxRunningPerQueue bounds the tasks of one queue (each lane queue apart
// from its lane's others) that run at once in the
// worker; 0 sets no bound. A task of a queue at its bound waits, in key
// order, without taking a slot (Concurrency), while tasks of other queues
// start on the free slots: a queue whose handlers wait long (onceq serve's
// tasks wait for their clients' acknowledgements) cannot hold every slot.
// The waiting tasks of a queue take its places highest priority first,
// then oldest first, whichever partition each came from.
// A waiting task has not started: at shutdown or when its partition is
// revoked it stays uncommitted and runs on the partition's next owner.
// Default 0 (no bound).
func MaxRunningPerQueue(n int) Opt { return optFunc(func(c *config) { c.maxPerQueue = n }) }

// OwnLimits, when on, leaves the limits of queues (control.SetLimit) to
// the handler: the worker starts every task without claiming a place
// under its queue's limit, and the handler claims one when the task's
// work begins. onceq serve does, whose tasks wait in their handlers for
// an HTTP consumer: a task runs, under its queue's limit, from the
// moment it is handed out. Default off: a task of a limited queue waits
// in its slot for its place before its handler runs.
func OwnLimits(on bool) Opt { return optFunc(func(c *config) { c.ownLimits = on }) }

// resultRoom bounds what a task record holds besides its result: the ID,
// queue, error text and the other fields.
const resultRoom = 4096

// maxResult is the largest result whose task record fits a record of
// maxMessageBytes, once in base64.
func maxResult(maxMessageBytes int) int { return (maxMessageBytes - resultRoom) / 4 * 3 }

// CommitHook calls fn at each point of every commit cycle that commits
// something. It is for fault injection: the crash tests kill the process
// there. Default none.
func CommitHook(fn func(CommitPoint)) Opt { return optFunc(func(c *config) { c.commitHook = fn }) }

// member is the worker's group membership as its options set it (see
// newKafkaSide for the rest).
func (c *config) member() broker.MemberConfig {
	return broker.MemberConfig{Conn: c.conn, Group: c.group, Protocol: c.groupProtocol, SessionTimeout: c.sessionTimeout,
		TransactionTimeout: c.txnTimeout, AtLeastOnce: c.guarantee == AtLeastOnce, Log: c.log}
}

// validate checks the options and fills in what derives from them; it
// reports every refused option at once, and nils nil options.
func (c *config) validate(nils int) error {
	errs := onceq.OptionErrors{Pkg: "consumer", Kind: ErrConfig}
	if nils > 0 {
		errs.Add(fmt.Errorf("consumer: %d nil options", nils))
	}
	if c.handler == nil {
		errs.Missing("WithHandler", "no handler: pass consumer.WithHandler")
	}
	if len(c.queues) == 0 {
		errs.Missing("Queues", "no queues: pass consumer.Queues")
	}
	var names, patterns []string
	for _, q := range c.queues {
		if IsPattern(q) {
			if err := checkPattern(q); err != nil {
				errs.Bad("Queues", q, "%v", err)
			}
			patterns = append(patterns, q)
			continue
		}
		// The workflow service is a worker of onceq.WorkflowQueue.
		if err := onceq.ValidateTaskQueue(q); err != nil {
			errs.Bad("Queues", q, "%v", err)
		}
		names = append(names, q)
	}
	if len(patterns) > 0 && slices.ContainsFunc(names, broker.IsInternal) {
		errs.Bad("Queues", strings.Join(c.queues, ","), "onceq's own queues are consumed by name alone: give patterns to another worker")
	}
	if _, err := ParseGuarantee(string(c.guarantee)); err != nil {
		errs.Bad("WithGuarantee", string(c.guarantee), "use exactly-once or at-least-once")
	}
	c.member().Check(&errs) // Group, TransactionTimeout, GroupProtocol
	if onceq.ValidateTopic(c.group) == nil && c.guarantee == ExactlyOnce {
		// The changelog topic of each queue must fit Kafka's limit on
		// topic names: a longer one cannot be created (or, on the
		// embedded broker before it refused such names, broke its data
		// dir), and the worker could never commit.
		errs.Add(broker.ValidateChangelog(c.group, names...))
	}
	if c.checkpointDir == "" && c.guarantee == ExactlyOnce {
		errs.Missing("CheckpointDir", "empty: an exactly-once worker keeps its checkpoint and instance ID in a directory")
	}
	if c.concurrency < 1 {
		errs.Bad("Concurrency", c.concurrency, "want 1 or more")
	}
	if c.onDemandLine < 0 {
		errs.Bad("OnDemandLine", c.onDemandLine, "want 0 (hold none) or more tasks")
	}
	if c.maxPerQueue < 0 {
		errs.Bad("MaxRunningPerQueue", c.maxPerQueue, "want 0 (no bound) or more")
	}
	if c.quietAfter < 2*broker.WakeEvery {
		errs.Bad("QuietAfter", c.quietAfter, "want %v or more: twice the time between two wake-ups of a queue", 2*broker.WakeEvery)
	}
	if c.commitInterval < time.Millisecond {
		errs.Bad("CommitInterval", c.commitInterval, "want 1ms or more")
	}
	if c.maxPerCommit < 1 {
		errs.Bad("MaxRecordsPerCommit", c.maxPerCommit, "want 1 or more")
	}
	if c.maxBuffered < max(c.concurrency, 1) {
		errs.Bad("MaxBufferedRecords", c.maxBuffered, "want at least the concurrency (%d)", c.concurrency)
	}
	if c.lookahead < 0 {
		errs.Bad("PriorityLookahead", c.lookahead, "want 0 (off) or more")
	}
	if c.dedupWindow < time.Minute {
		errs.Bad("DedupWindow", c.dedupWindow, "want 1m or more")
	}
	if c.taskTimeout <= 0 {
		errs.Bad("TaskTimeout", c.taskTimeout, "want more than 0")
	}
	if c.shutdownTimeout < 0 {
		errs.Bad("ShutdownTimeout", c.shutdownTimeout, "want 0 or more")
	}
	if c.retryPause < 0 {
		errs.Bad("RetryPause", c.retryPause, "want 0 or more")
	}
	if c.maxAttempts < 1 {
		errs.Bad("MaxAttempts", c.maxAttempts, "want 1 or more")
	}
	if c.jitter < 0 || c.jitter > 1 {
		errs.Bad("Jitter", c.jitter, "want 0 to 1")
	}
	if c.abandonGrace < 0 {
		errs.Bad("AbandonGrace", c.abandonGrace, "want 0 or more")
	}
	if _, err := onceq.ParseBackoff(onceq.FormatBackoff(c.backoff)); err != nil || c.backoff.Base%time.Millisecond != 0 || c.backoff.Max%time.Millisecond != 0 {
		errs.Bad("Backoff", c.backoff, "want whole milliseconds with max >= base > 0 and a factor from 1 to 100")
	}
	if c.maxMessageBytes < 1 {
		errs.Bad("MaxMessageBytes", c.maxMessageBytes, "want 1 or more")
	}
	if c.runningAfter < 0 || c.runningAfter > 0 && c.runningAfter < 100*time.Millisecond {
		errs.Bad("RecordRunningAfter", c.runningAfter, "want 0 (no runs in progress recorded) or 100ms or more")
	}
	if c.resultRetention < 0 || c.resultRetention > 0 && c.resultRetention < time.Minute {
		errs.Bad("ResultRetention", c.resultRetention, "want 0 (states only) or 1m or more")
	}
	if room := maxResult(c.maxMessageBytes); c.maxResultBytes < 1 || c.maxResultBytes > room {
		errs.Bad("MaxResultBytes", c.maxResultBytes, "want 1 to %d: a result is written in base64 in a task record, which must fit the largest record (MaxMessageBytes, %d)", max(room, 1), c.maxMessageBytes)
	}
	errs.Add(c.conn.Validate())
	return errs.Err()
}
