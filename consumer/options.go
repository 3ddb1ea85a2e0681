package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
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

// ErrConfig is wrapped by every invalid option.
var ErrConfig = errors.New("invalid worker option")

// Opt configures a Worker.
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
	defaultTimeout  time.Duration
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
}

func defaults() config {
	return config{
		conn:            broker.Conn{Brokers: []string{broker.DefaultBrokers}},
		group:           "onceq",
		concurrency:     32,
		commitInterval:  100 * time.Millisecond,
		maxPerCommit:    20_000,
		dedupWindow:     7 * 24 * time.Hour,
		maxBuffered:     50_000,
		defaultTimeout:  30 * time.Second,
		guarantee:       ExactlyOnce,
		sessionTimeout:  10 * time.Second,
		txnTimeout:      8 * time.Second,
		shutdownTimeout: 30 * time.Second,
		retryPause:      time.Second,
		maxAttempts:     5,
		backoff:         onceq.Backoff{Base: time.Second, Factor: 2, Max: time.Hour},
		jitter:          0.2,
		abandonGrace:    5 * time.Second,
		maxMessageBytes: onceq.DefaultMaxMessageBytes,
		log:             slog.New(slog.DiscardHandler),
	}
}

// Conn sets how to reach the brokers. Default: 127.0.0.1:9092, plaintext.
func Conn(c broker.Conn) Opt { return optFunc(func(cfg *config) { cfg.conn = c }) }

// Group sets the consumer group. Workers of one group share the queues'
// partitions. Default "onceq". Under ExactlyOnce the group and each queue
// name the queue's changelog topic (broker.ChangelogTopic), which must fit
// Kafka's limit of 249 bytes on topic names: New refuses a group and queue
// longer than about 227 bytes together (broker.ValidateChangelog).
func Group(g string) Opt { return optFunc(func(c *config) { c.group = g }) }

// Queues sets the queues to run. Required.
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
// one at a time in offset order; different keys run concurrently. Default 32.
func Concurrency(n int) Opt { return optFunc(func(c *config) { c.concurrency = n }) }

// CommitInterval is how often completed tasks are committed. Shorter
// lowers latency to visibility and the work redone after a crash; longer
// raises throughput. Default 100ms.
func CommitInterval(d time.Duration) Opt { return optFunc(func(c *config) { c.commitInterval = d }) }

// MaxRecordsPerCommit commits early once this many tasks completed.
// Default 20,000.
func MaxRecordsPerCommit(n int) Opt { return optFunc(func(c *config) { c.maxPerCommit = n }) }

// DedupWindow is how long processed IDs are remembered. A duplicate
// submitted later than this after the original runs again. Default 7 days.
func DedupWindow(d time.Duration) Opt { return optFunc(func(c *config) { c.dedupWindow = d }) }

// MaxBufferedRecords bounds the records fetched but not yet committed, and
// so the worker's memory. Default 50,000.
func MaxBufferedRecords(n int) Opt { return optFunc(func(c *config) { c.maxBuffered = n }) }

// DefaultTimeout is the time-to-run of a task without onceq-timeout: its
// handler's context is canceled after it. Default 30s.
func DefaultTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.defaultTimeout = d }) }

// WithGuarantee sets ExactlyOnce (the default) or AtLeastOnce.
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
// keeps its partitions. Default 10s.
func SessionTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.sessionTimeout = d }) }

// TransactionTimeout bounds an open transaction; the broker aborts it
// after that. It must be below SessionTimeout. Default 8s.
func TransactionTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.txnTimeout = d }) }

// ShutdownTimeout bounds the wait for in-flight handlers on shutdown;
// handlers still running after it are abandoned and their tasks run again
// elsewhere. Default 30s.
func ShutdownTimeout(d time.Duration) Opt { return optFunc(func(c *config) { c.shutdownTimeout = d }) }

// RetryPause is the wait before a task runs again in place after an
// infrastructure error (the checkpoint or the brokers failed, not the
// handler). Default 1s.
func RetryPause(d time.Duration) Opt { return optFunc(func(c *config) { c.retryPause = d }) }

// MaxAttempts is how many times a task without onceq-max-attempts runs
// before it goes to its dead letters. Default 5.
func MaxAttempts(n int) Opt { return optFunc(func(c *config) { c.maxAttempts = n }) }

// Backoff sets the retry backoff of tasks without onceq-backoff: attempt n
// waits base*factor^(n-1), at most max, plus jitter. Default 1s, 2, 1h.
func Backoff(base time.Duration, factor float64, maxDelay time.Duration) Opt {
	return optFunc(func(c *config) { c.backoff = onceq.Backoff{Base: base, Factor: factor, Max: maxDelay} })
}

// Jitter adds up to this fraction of the backoff, at random, so that
// tasks that failed together do not retry together. It only adds: a retry
// never comes before its backoff. Default 0.2.
func Jitter(f float64) Opt { return optFunc(func(c *config) { c.jitter = f }) }

// DropExpired, when true, drops tasks past onceq-expires (counted as
// outcome "expired") instead of dead-lettering them with reason "expired".
// Default false.
func DropExpired(drop bool) Opt { return optFunc(func(c *config) { c.dropExpired = drop }) }

// AbandonGrace is how long a handler may run past its time-to-run, with
// its context canceled, before the worker stops waiting for it: its result
// is then discarded, the run counts as a retryable failure and
// onceq_abandoned_handlers counts it. Default 5s.
func AbandonGrace(d time.Duration) Opt { return optFunc(func(c *config) { c.abandonGrace = d }) }

// Planner sets the delay planner for emitted delayed tasks. Default: the
// default bucket ladder.
func Planner(p *delay.Planner) Opt { return optFunc(func(c *config) { c.planner = p }) }

// MaxMessageBytes is the largest record the brokers accept. Default 1 MiB.
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
	ClassicGroup = "classic"
	// ConsumerGroup is KIP-848's protocol, where the broker assigns the
	// partitions (Kafka 4.0+; 4.3+ recommended).
	ConsumerGroup = "consumer"
)

// GroupProtocol selects ClassicGroup (the default) or ConsumerGroup. With
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

// CommitHook calls fn at each point of every commit cycle that commits
// something. It is for fault injection: the crash tests kill the process
// there. Default none.
func CommitHook(fn func(CommitPoint)) Opt { return optFunc(func(c *config) { c.commitHook = fn }) }

func (c *config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("consumer: %s: %w", fmt.Sprintf(format, args...), ErrConfig)
	}
	if c.handler == nil {
		return bad("no handler: pass consumer.WithHandler")
	}
	if len(c.queues) == 0 {
		return bad("no queues: pass consumer.Queues")
	}
	for _, q := range c.queues {
		if err := onceq.ValidateQueue(q); err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
	}
	if err := onceq.ValidateTopic(c.group); err != nil {
		return bad("group %q: use letters, digits, '.', '_' or '-'", c.group)
	}
	if c.guarantee == ExactlyOnce {
		// The changelog topic of each queue must fit Kafka's limit on
		// topic names: a longer one cannot be created (or, on the
		// embedded broker before it refused such names, broke its data
		// dir), and the worker could never commit.
		if err := broker.ValidateChangelog(c.group, c.queues...); err != nil {
			return fmt.Errorf("consumer: %w: %w", err, ErrConfig)
		}
	}
	if c.checkpointDir == "" && c.guarantee == ExactlyOnce {
		return bad("checkpoint dir is empty: an exactly-once worker keeps its checkpoint and instance ID in a directory")
	}
	switch {
	case c.concurrency < 1:
		return bad("concurrency %d: want 1 or more", c.concurrency)
	case c.commitInterval < time.Millisecond:
		return bad("commit interval %v: want 1ms or more", c.commitInterval)
	case c.maxPerCommit < 1:
		return bad("max records per commit %d: want 1 or more", c.maxPerCommit)
	case c.maxBuffered < c.concurrency:
		return bad("max buffered records %d: want at least the concurrency (%d)", c.maxBuffered, c.concurrency)
	case c.dedupWindow < time.Minute:
		return bad("dedup window %v: want 1m or more", c.dedupWindow)
	case c.defaultTimeout <= 0:
		return bad("default timeout %v: want more than 0", c.defaultTimeout)
	case c.txnTimeout < time.Second || c.txnTimeout >= c.sessionTimeout:
		return bad("transaction timeout %v: want 1s or more and below the session timeout %v", c.txnTimeout, c.sessionTimeout)
	case c.shutdownTimeout < 0:
		return bad("shutdown timeout %v: want 0 or more", c.shutdownTimeout)
	case c.retryPause < 0:
		return bad("retry pause %v: want 0 or more", c.retryPause)
	case c.maxAttempts < 1:
		return bad("max attempts %d: want 1 or more", c.maxAttempts)
	case c.jitter < 0 || c.jitter > 1:
		return bad("jitter %v: want 0 to 1", c.jitter)
	case c.abandonGrace < 0:
		return bad("abandon grace %v: want 0 or more", c.abandonGrace)
	case c.groupProtocol != "" && c.groupProtocol != ClassicGroup && c.groupProtocol != ConsumerGroup:
		return bad("group protocol %q: use classic or consumer", c.groupProtocol)
	}
	if _, err := onceq.ParseBackoff(onceq.FormatBackoff(c.backoff)); err != nil || c.backoff.Base%time.Millisecond != 0 || c.backoff.Max%time.Millisecond != 0 {
		return bad("backoff %v, %v, %v: want whole milliseconds with max >= base > 0 and a factor from 1 to 100", c.backoff.Base, c.backoff.Factor, c.backoff.Max)
	}
	if _, err := ParseGuarantee(string(c.guarantee)); err != nil {
		return fmt.Errorf("%w: %w", err, ErrConfig)
	}
	if err := c.conn.Validate(); err != nil {
		return err
	}
	if c.planner == nil {
		p, err := delay.NewPlanner(delay.DefaultBuckets)
		if err != nil {
			return err
		}
		c.planner = p
	}
	return nil
}
