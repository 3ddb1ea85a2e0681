package workflow

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/delay"
)

// ErrConfig is wrapped by every option NewService refuses.
var ErrConfig = errors.New("invalid workflow option")

// Defaults of the service's options.
const (
	// DefaultGroup is the consumer group of the workflow services: one
	// group for every service of a cluster, whichever workers run them.
	DefaultGroup = "onceq-workflow"
	// DefaultCommitInterval is the service's commit interval: shorter than
	// a worker's default, since every join and every start is a hop
	// between two steps of a workflow.
	DefaultCommitInterval = 10 * time.Millisecond
	// DefaultConcurrency is how many workflows and joins the service
	// handles at once (one join's reports run one at a time).
	DefaultConcurrency = 64
	// DefaultRetention is how long the shape of a started workflow is
	// kept, which Get needs: the workers' default result retention.
	DefaultRetention = consumer.DefaultResultRetention
)

// MaxDefinitionBytes bounds a workflow's shape (its steps' queues and
// IDs, kept as the result of its start task), so that its task record
// fits a record of the broker's default limit.
const MaxDefinitionBytes = 640 << 10

// An Opt configures a Service.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	conn           broker.Conn
	dir            string
	group          string
	log            *slog.Logger
	reg            prometheus.Registerer
	planner        *delay.Planner
	commitInterval time.Duration
	concurrency    int
	retention      time.Duration
	workerOpts     []consumer.Opt
}

// Conn sets how to reach the brokers. Default: broker.DefaultBrokers,
// plaintext.
func Conn(c broker.Conn) Opt { return optFunc(func(cfg *config) { cfg.conn = c }) }

// Dir is the service's own directory: its worker's checkpoint and the
// view of dependencies' task records, one per service. Default "" keeps
// them in memory: a restarted service restores its joins' state from its
// changelog, and reads the dependencies' records again.
func Dir(dir string) Opt { return optFunc(func(cfg *config) { cfg.dir = dir }) }

// ConsumerGroup is the service's consumer group. Default DefaultGroup
// ("onceq-workflow"); every service of a cluster must share one.
func ConsumerGroup(g string) Opt { return optFunc(func(cfg *config) { cfg.group = g }) }

// Logger receives the service's logs. Default: discarded.
func Logger(l *slog.Logger) Opt { return optFunc(func(cfg *config) { cfg.log = l }) }

// Registerer registers the service's metrics (onceq_workflows_started_total,
// onceq_workflow_joins_total). Its worker's are not registered, so that
// the service can share a registerer with a worker of the same process.
// Default: none.
func Registerer(r prometheus.Registerer) Opt { return optFunc(func(cfg *config) { cfg.reg = r }) }

// Planner is the delay bucket ladder the service expects for delayed
// steps and dependency checks (see consumer.Planner): a ladder other than
// the cluster's is refused. Default: the cluster's ladder.
func Planner(p *delay.Planner) Opt { return optFunc(func(cfg *config) { cfg.planner = p }) }

// CommitInterval is the service's commit interval. Default
// DefaultCommitInterval (10ms).
func CommitInterval(d time.Duration) Opt {
	return optFunc(func(cfg *config) { cfg.commitInterval = d })
}

// Concurrency bounds the starts and joins handled at once. Default
// DefaultConcurrency (64).
func Concurrency(n int) Opt { return optFunc(func(cfg *config) { cfg.concurrency = n }) }

// Retention is how long a started workflow's shape is kept (what Get
// needs to show its steps): the workers' result retention. Default
// DefaultRetention (7 days).
func Retention(d time.Duration) Opt { return optFunc(func(cfg *config) { cfg.retention = d }) }

// WorkerOpts passes further options to the service's worker (for example
// consumer.TransactionTimeout, consumer.CommitHook). They come after the
// service's own.
func WorkerOpts(opts ...consumer.Opt) Opt {
	return optFunc(func(cfg *config) { cfg.workerOpts = append(cfg.workerOpts, opts...) })
}

func newConfig(opts []Opt) (config, error) {
	cfg := config{conn: broker.Conn{Brokers: []string{broker.DefaultBrokers}}, group: DefaultGroup, log: slog.New(slog.DiscardHandler),
		commitInterval: DefaultCommitInterval, concurrency: DefaultConcurrency, retention: DefaultRetention}
	errs := onceq.OptionErrors{Pkg: "workflow", Kind: ErrConfig}
	onceq.ApplyOptions(&errs, opts, func(o Opt) { o.apply(&cfg) })
	if cfg.log == nil {
		errs.Bad("Logger", nil, "a logger, not nil")
	}
	if cfg.concurrency < 1 {
		errs.Bad("Concurrency", cfg.concurrency, "want 1 or more")
	}
	if cfg.commitInterval < time.Millisecond {
		errs.Bad("CommitInterval", cfg.commitInterval, "want 1ms or more")
	}
	if cfg.retention < time.Minute {
		errs.Bad("Retention", cfg.retention, "want 1m or more")
	}
	errs.Add(cfg.conn.Validate())
	return cfg, errs.Err()
}
