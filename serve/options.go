package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/serve/internal/pull"
)

// ErrConfig is wrapped by every option New refuses.
var ErrConfig = errors.New("invalid serve option")

// Defaults of the options.
const (
	// DefaultPartitions is the partition count of a queue created by its
	// first publish.
	DefaultPartitions = 8
	// DefaultMaxPayloadBytes bounds one task's payload.
	DefaultMaxPayloadBytes = 256 << 10
	// DefaultMaxBulkBytes bounds a bulk publish's body.
	DefaultMaxBulkBytes = 16 << 20
	// DefaultMaxWait bounds the timeout of a wait.
	DefaultMaxWait = 10 * time.Minute
	// DefaultReadHeaderTimeout bounds the reading of a request's header.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultBodyReadTimeout bounds the reading of a request's body.
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a kept-alive connection waits for
	// its next request.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConns bounds the connections a listener holds open.
	DefaultMaxConns = 1024
	// MinRateLimit is the lowest rate RateLimit takes: about one request
	// a day (a token's wait for its next request must fit a duration).
	MinRateLimit = 0.00001
	// MinRetention is the shortest Retention, inspect's.
	MinRetention = time.Minute
)

// Defaults of the pull model (package doc: Consuming over HTTP).
const (
	// DefaultPullGroup is the consumer group of the servers' workers.
	DefaultPullGroup = "onceq-serve"
	// DefaultPullSlots is how many tasks of a queue one server holds
	// waiting for its consumers at once; those handed out count only
	// toward PullHeld.
	DefaultPullSlots = 64
	// DefaultPullHeld is how many tasks one server holds at once, of every
	// queue; MaxPullHeld bounds it.
	DefaultPullHeld = 32_768
	MaxPullHeld     = 1_000_000
)

// An Opt configures a Server.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	conn          broker.Conn
	log           *slog.Logger
	reg           prometheus.Registerer
	insecure      bool
	accounts      auth.Accounts
	partitions    int32
	lane          string
	maxPayload    int
	maxBulk       int
	maxWait       time.Duration
	viewDir       string
	retention     time.Duration
	dataDir       string
	pullGroup     string
	pullSlots     int
	pullHeld      int
	releaseAfter  time.Duration // pull.ReleaseAfter; tests shorten it (export_test.go)
	ackRunWait    time.Duration // pull.AckRunWait; tests shorten it (export_test.go)
	delaySvc      bool
	workflowSvc   bool
	scheduler     bool
	records       bool // jobs published without an ID are recorded (producer.Records)
	rate          float64
	burst         int
	headerTimeout time.Duration
	bodyTimeout   time.Duration
	maxConns      int
}

// Conn sets how to reach the brokers. Default: broker.DefaultBrokers.
func Conn(c broker.Conn) Opt { return optFunc(func(cfg *config) { cfg.conn = c }) }

// Logger receives the server's logs. Default: discarded.
func Logger(l *slog.Logger) Opt { return optFunc(func(cfg *config) { cfg.log = l }) }

// Registerer registers the server's metrics. Default: none kept.
func Registerer(r prometheus.Registerer) Opt { return optFunc(func(cfg *config) { cfg.reg = r }) }

// InsecureNoAuth opens every endpoint without a token. Default false:
// every endpoint but /healthz and /readyz needs one.
func InsecureNoAuth(b bool) Opt { return optFunc(func(cfg *config) { cfg.insecure = b }) }

// AdminAccounts are operators' accounts of the admin API (AdminHandler),
// lmstfy's: a request that gives one's name and password by HTTP basic
// auth is an operator's, as one with an operator's token is. Default
// none.
func AdminAccounts(a auth.Accounts) Opt { return optFunc(func(cfg *config) { cfg.accounts = a }) }

// CreateQueues sets the partition count of a queue created by its first
// publish, 1 to broker.MaxPartitions (10,000, what onceq creates in a
// topic); 0 refuses to publish to a queue that does not exist. Default
// DefaultPartitions (8).
func CreateQueues(partitions int32) Opt {
	return optFunc(func(cfg *config) { cfg.partitions = partitions })
}

// DefaultLane is onceq serve's lane (its --lane).
const DefaultLane = "serve"

// Lane puts the namespaces' queues on one lane: queue q of namespace ns
// is lane queue <lane>/<ns>.<q>, a label on the topic lane (created with
// CreateQueues partitions), whatever the number of queues. Default "":
// each queue is a topic of its own, <ns>.<q> (onceq serve's default is
// DefaultLane). With a lane, the jobs waiting in a queue's topic <ns>.<q>
// move to its lane queue when a consumer asks for the queue.
func Lane(name string) Opt { return optFunc(func(cfg *config) { cfg.lane = name }) }

// MaxPayloadBytes bounds a task's payload with its attributes (lmstfy's
// Job-Attr-* headers as sent, a bulk task's headers): a larger one is
// answered 413. Default DefaultMaxPayloadBytes (256 KiB).
func MaxPayloadBytes(n int) Opt { return optFunc(func(cfg *config) { cfg.maxPayload = n }) }

// MaxBulkBytes bounds a bulk publish's body. Default DefaultMaxBulkBytes
// (16 MiB).
func MaxBulkBytes(n int) Opt { return optFunc(func(cfg *config) { cfg.maxBulk = n }) }

// MaxWait bounds the timeout a wait may ask for. Default DefaultMaxWait
// (10m).
func MaxWait(d time.Duration) Opt { return optFunc(func(cfg *config) { cfg.maxWait = d }) }

// ViewDir keeps the task records' view in a directory (inspect.Dir).
// Default "": in memory.
func ViewDir(dir string) Opt { return optFunc(func(cfg *config) { cfg.viewDir = dir }) }

// Retention is how long finished tasks stay visible (inspect.Retention),
// MinRetention (1m) or more. Default inspect.DefaultRetention (7 days).
func Retention(d time.Duration) Opt { return optFunc(func(cfg *config) { cfg.retention = d }) }

// DataDir keeps the checkpoints of the pulled queues' workers in dir.
// Default "": in memory, restored from their changelogs at each start.
func DataDir(dir string) Opt { return optFunc(func(cfg *config) { cfg.dataDir = dir }) }

// PullGroup is the consumer group of the workers that hand tasks to HTTP
// consumers: every server of one deployment uses the same. Default
// DefaultPullGroup.
func PullGroup(g string) Opt { return optFunc(func(cfg *config) { cfg.pullGroup = g }) }

// PullSlots is how many tasks of a queue one server holds waiting for its
// HTTP consumers at once; a task handed out gives its place to the
// queue's next (it counts toward PullHeld until its ACK or ttr). Default
// DefaultPullSlots (64).
func PullSlots(n int) Opt { return optFunc(func(cfg *config) { cfg.pullSlots = n }) }

// PullHeld is how many tasks one server holds at once, of every queue:
// handed out to HTTP consumers (until their ACK or ttr) or waiting for
// one. Past it, consumes wait for a held task to end. A held task costs
// its record and a goroutine, so the bound is the server's memory for
// jobs in flight. Default DefaultPullHeld (32,768).
func PullHeld(n int) Opt { return optFunc(func(cfg *config) { cfg.pullHeld = n }) }

// DelayService runs a delay service (package delay, its default ladder
// and group) in the server, which moves delayed and retried tasks, those
// of the HTTP consumers included, when they fall due; several servers
// and workers share the work. Default true; turn it off where onceq
// worker or onceq delay processes run one.
func DelayService(on bool) Opt { return optFunc(func(cfg *config) { cfg.delaySvc = on }) }

// WorkflowService runs a workflow service (package workflow) in the
// server, which starts the workflows published to it and joins their
// groups. Default on; off when onceq worker processes run one.
func WorkflowService(on bool) Opt { return optFunc(func(cfg *config) { cfg.workflowSvc = on }) }

// Scheduler runs a periodic scheduler (package periodic) in the server,
// which submits the ticks of the schedules (onceq periodic add); any
// number of schedulers submit each tick once. Default on.
func Scheduler(on bool) Opt { return optFunc(func(cfg *config) { cfg.scheduler = on }) }

// DefaultRecords: jobs are recorded from their publish. See Records.
const DefaultRecords = true

// Records says whether a job published without an ID is recorded in its
// queue's task records from its publish, pending or scheduled, as one
// with an ID always is (producer.Records): its task, the queue's stats and
// the console know it, and onceq's cancel finds it, before it is handed
// out. It costs a record per publish, written beside the job, and the
// server's view applying it: about 0.3 ms of the server's CPU and 0.2 ms
// of the broker's per publish at 500 queues (BenchmarkServeQueues).
// Default on; off, such a job has no record until it is handed out, as
// lmstfy's jobs have none.
func Records(on bool) Opt { return optFunc(func(cfg *config) { cfg.records = on }) }

// RateLimit bounds each token's requests (with InsecureNoAuth, each
// client address's): perSecond on average, burst at once; a request past
// it is answered 429 with Retry-After. perSecond is 0 (no limit; burst is
// then not used, and must not be negative) or a finite rate of at least
// MinRateLimit with a burst of 1 or more. Default 0: no limit.
func RateLimit(perSecond float64, burst int) Opt {
	return optFunc(func(cfg *config) { cfg.rate, cfg.burst = perSecond, burst })
}

// ReadHeaderTimeout bounds the reading of a request's header, on the
// http.Server of HTTPServer. Default DefaultReadHeaderTimeout (10s).
func ReadHeaderTimeout(d time.Duration) Opt {
	return optFunc(func(cfg *config) { cfg.headerTimeout = d })
}

// BodyReadTimeout bounds the reading of a request's body, from the
// request's start, in Handler and AdminHandler: a body slower than that
// is answered 408, or, before the token is checked, its connection is
// closed. Default DefaultBodyReadTimeout (30s).
func BodyReadTimeout(d time.Duration) Opt { return optFunc(func(cfg *config) { cfg.bodyTimeout = d }) }

// MaxConns bounds the connections a listener wrapped by Listener holds
// open at once. Default DefaultMaxConns (1024).
func MaxConns(n int) Opt { return optFunc(func(cfg *config) { cfg.maxConns = n }) }

func build(opts []Opt) (config, error) {
	cfg := config{conn: broker.Conn{Brokers: []string{broker.DefaultBrokers}}, log: slog.New(slog.DiscardHandler),
		reg: prometheus.NewRegistry(), partitions: DefaultPartitions, maxPayload: DefaultMaxPayloadBytes,
		maxBulk: DefaultMaxBulkBytes, maxWait: DefaultMaxWait, retention: broker.DefaultRecordsRetention,
		pullGroup: DefaultPullGroup, pullSlots: DefaultPullSlots, pullHeld: DefaultPullHeld, releaseAfter: pull.ReleaseAfter, ackRunWait: pull.AckRunWait, delaySvc: true, workflowSvc: true, scheduler: true, records: DefaultRecords,
		headerTimeout: DefaultReadHeaderTimeout, bodyTimeout: DefaultBodyReadTimeout, maxConns: DefaultMaxConns}
	errs := onceq.OptionErrors{Pkg: "serve", Kind: ErrConfig}
	onceq.ApplyOptions(&errs, opts, func(o Opt) { o.apply(&cfg) })
	if cfg.log == nil {
		errs.Bad("Logger", nil, "a logger, not nil")
	}
	if cfg.reg == nil {
		errs.Bad("Registerer", nil, "a registerer, not nil")
	}
	if cfg.partitions < 0 || cfg.partitions > broker.MaxPartitions {
		errs.Bad("CreateQueues", cfg.partitions, "want a partition count from 1 to %d (broker.MaxPartitions), or 0 to refuse missing queues", broker.MaxPartitions)
	}
	if cfg.maxPayload < 1 || cfg.maxPayload > 64<<20 {
		errs.Bad("MaxPayloadBytes", cfg.maxPayload, "want 1 to 64 MiB")
	}
	if cfg.maxBulk < 1024 || cfg.maxBulk > 1<<30 {
		errs.Bad("MaxBulkBytes", cfg.maxBulk, "want 1 KiB to 1 GiB")
	}
	if cfg.maxWait < time.Second {
		errs.Bad("MaxWait", cfg.maxWait, "want 1s or more")
	}
	if cfg.lane != "" && (onceq.ValidateQueue(cfg.lane) != nil || broker.IsInternal(cfg.lane)) {
		errs.Bad("Lane", cfg.lane, "a topic's name (letters, digits, '.', '_', '-'), not onceq's own (onceq-...): for example lmstfy")
	}
	if cfg.pullGroup == "" {
		errs.Bad("PullGroup", cfg.pullGroup, "a consumer group name")
	}
	if cfg.pullSlots < 1 || cfg.pullSlots > 10_000 {
		errs.Bad("PullSlots", cfg.pullSlots, "want 1 to 10000")
	}
	if cfg.pullHeld < 1 || cfg.pullHeld > MaxPullHeld {
		errs.Bad("PullHeld", cfg.pullHeld, "want 1 to %d", MaxPullHeld)
	}
	if !validRate(cfg.rate, cfg.burst) {
		errs.Bad("RateLimit", fmt.Sprintf("%v/s, burst %d", cfg.rate, cfg.burst),
			"want a rate of 0 (no limit, and a burst of 0 or more), or a finite rate of %s (about one a day) or more requests a second with a burst of 1 or more",
			strconv.FormatFloat(MinRateLimit, 'f', -1, 64))
	}
	if cfg.retention < MinRetention {
		errs.Bad("Retention", cfg.retention, "want 1m (MinRetention) or more: how long finished tasks stay visible")
	}
	if cfg.headerTimeout < time.Millisecond {
		errs.Bad("ReadHeaderTimeout", cfg.headerTimeout, "want 1ms or more")
	}
	if cfg.bodyTimeout < time.Millisecond {
		errs.Bad("BodyReadTimeout", cfg.bodyTimeout, "want 1ms or more")
	}
	if cfg.maxConns < 1 {
		errs.Bad("MaxConns", cfg.maxConns, "want 1 or more connections")
	}
	errs.Add(cfg.conn.Validate())
	return cfg, errs.Err()
}

// validRate says whether RateLimit takes a rate and burst: NaN, which
// compares false, is refused with the infinities.
func validRate(rate float64, burst int) bool {
	if rate == 0 {
		return burst >= 0
	}
	return rate >= MinRateLimit && !math.IsInf(rate, 1) && burst >= 1
}

// Check reports what New would refuse of opts, as New reports it (every
// refused option, each wrapping ErrConfig), without connecting to
// anything: a program checks its flags with it before it reaches the
// brokers.
func Check(opts ...Opt) error {
	_, err := build(opts)
	return err
}
