package delay

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// ErrServiceConfig is wrapped by every invalid option NewService refuses.
var ErrServiceConfig = errors.New("invalid delay service option")

// Defaults of the service options.
const (
	// DefaultGroup is the consumer group of the delay service.
	DefaultGroup = "onceq-delay"
	// DefaultCommitInterval is the shortest time between two
	// transactions. See CommitInterval.
	DefaultCommitInterval = 10 * time.Millisecond
	// DefaultMaxHeld bounds the records held in memory. See MaxHeld.
	DefaultMaxHeld = 200_000
	// DefaultSessionTimeout is the group session timeout.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultTransactionTimeout is the broker's limit on one transaction.
	DefaultTransactionTimeout = 8 * time.Second
	// DefaultStatsInterval is how often the waiting counts are refreshed.
	DefaultStatsInterval = 5 * time.Second
	// DefaultGroupProtocol is the group protocol. See GroupProtocol.
	DefaultGroupProtocol = broker.ClassicGroup
)

// A ServiceOpt configures a Service. Options are applied in order;
// NewService checks the result once.
type ServiceOpt interface{ apply(*serviceConfig) }

type serviceOptFunc func(*serviceConfig)

func (f serviceOptFunc) apply(c *serviceConfig) { f(c) }

type serviceConfig struct {
	conn           broker.Conn
	planner        *Planner
	given          *Planner // the planner WithPlanner set, nil for the cluster's
	group          string
	log            *slog.Logger
	registerer     prometheus.Registerer
	stateDir       string
	instanceID     string
	commitInterval time.Duration
	maxHeld        int
	sessionTimeout time.Duration
	txnTimeout     time.Duration
	statsInterval  time.Duration
	groupProtocol  string
}

func defaultServiceConfig() serviceConfig {
	return serviceConfig{
		group:          DefaultGroup,
		log:            slog.New(slog.DiscardHandler),
		commitInterval: DefaultCommitInterval,
		maxHeld:        DefaultMaxHeld,
		sessionTimeout: DefaultSessionTimeout,
		txnTimeout:     DefaultTransactionTimeout,
		statsInterval:  DefaultStatsInterval,
		groupProtocol:  DefaultGroupProtocol,
	}
}

// Conn sets how to reach the brokers. Default broker.Conn{}: plaintext
// to broker.DefaultBrokers.
func Conn(c broker.Conn) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.conn = c })
}

// WithPlanner sets the bucket ladder the service expects: Run refuses to
// start when the cluster's ladder (ReadLadder) differs, and sets it on a
// cluster whose ladder was never set (see ClusterPlanner). Default: the
// cluster's ladder, DefaultBuckets when none was set. The service creates
// missing bucket topics with BucketTopicConfigs and
// DefaultBucketPartitions, and reads every bucket topic that exists,
// those of an earlier ladder too, so that nothing routed by it is
// stranded.
func WithPlanner(p *Planner) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.planner = p })
}

// Group sets the consumer group. Instances of one group share the
// bucket partitions. Default DefaultGroup ("onceq-delay").
func Group(g string) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.group = g })
}

// Logger receives the service's logs. Default: discarded.
func Logger(l *slog.Logger) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		cfg.log = l
	})
}

// Registerer registers the service's metrics: onceq_delayed_tasks,
// onceq_delay_lateness_seconds, onceq_delay_moves_total,
// onceq_delay_due_within and onceq_delay_held_tasks. One service per
// registerer. Default none: the metrics are kept but not exported.
func Registerer(r prometheus.Registerer) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.registerer = r })
}

// StateDir sets the directory that keeps the instance ID (file
// delay-instance-id), created on first start. A worker may pass its own
// checkpoint dir. Default none: a new instance ID on every start, so a
// restarted instance cannot fence its predecessor's open transaction and
// read_committed readers of the buckets wait for the broker to time it out.
func StateDir(dir string) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.stateDir = dir })
}

// InstanceID fixes the instance ID, from which the transactional ID
// and the static group membership derive. Two live instances of one group
// must never share it. Default (or empty): kept in the state dir
// (StateDir).
func InstanceID(id string) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.instanceID = id })
}

// CommitInterval is the shortest time between two transactions. A
// released record waits at most this long for its transaction, so it
// bounds the lateness the service adds; shorter costs more transactions
// per second. Default DefaultCommitInterval (10ms).
func CommitInterval(d time.Duration) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.commitInterval = d })
}

// MaxHeld bounds the records held in memory: read ahead of their
// release (see Planner.ReadAhead) and not yet moved. When it is reached the
// service reads no further until records move on, so memory stays bounded
// however many tasks wait; records released meanwhile may be late. Default
// DefaultMaxHeld (200,000).
func MaxHeld(n int) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.maxHeld = n })
}

// SessionTimeout is the group session timeout: how long a silent
// instance keeps its partitions. Default DefaultSessionTimeout (10s).
func SessionTimeout(d time.Duration) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.sessionTimeout = d })
}

// TransactionTimeout bounds an open transaction; the broker aborts it
// after that. It must be below the session timeout. Default
// DefaultTransactionTimeout (8s).
func TransactionTimeout(d time.Duration) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.txnTimeout = d })
}

// StatsInterval is how often onceq_delayed_tasks and
// onceq_delay_due_within are refreshed from the brokers. Default
// DefaultStatsInterval (5s).
func StatsInterval(d time.Duration) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.statsInterval = d })
}

// GroupProtocol selects broker.ClassicGroup ("classic") or
// broker.ConsumerGroup ("consumer", KIP-848: the broker assigns the
// partitions; Kafka 4.0+, 4.3+ recommended). Default DefaultGroupProtocol
// (classic). With classic an instance is a static member (its instance
// ID): a restart takes its partitions back without a rebalance. With
// consumer it is a dynamic member: a clean stop hands its partitions over
// at once, a crashed instance's move after the broker's
// group.consumer.session.timeout.ms.
func GroupProtocol(p string) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.groupProtocol = p })
}

// member is the service's group membership as its options set it (see
// Service.start for the rest).
func (c *serviceConfig) member() broker.MemberConfig {
	return broker.MemberConfig{Conn: c.conn, Group: c.group, Protocol: c.groupProtocol, SessionTimeout: c.sessionTimeout,
		TransactionTimeout: c.txnTimeout, Log: c.log}
}

// buildService applies opts over the defaults and checks the result,
// reporting every refused option at once.
func buildService(opts []ServiceOpt) (serviceConfig, error) {
	c := defaultServiceConfig()
	errs := onceq.OptionErrors{Pkg: "delay", Kind: ErrServiceConfig}
	for _, o := range opts {
		if o == nil {
			errs.Add(errors.New("delay: a nil option"))
			continue
		}
		o.apply(&c)
	}
	c.given = c.planner
	if c.planner == nil {
		c.planner = DefaultPlanner()
	}
	c.member().Check(&errs) // Group, TransactionTimeout, GroupProtocol
	if c.commitInterval < time.Millisecond || c.commitInterval > time.Minute {
		errs.Bad("CommitInterval", c.commitInterval, "want 1ms to 1m")
	}
	if c.maxHeld < 1 {
		errs.Bad("MaxHeld", c.maxHeld, "want 1 or more")
	}
	if c.statsInterval < 100*time.Millisecond {
		errs.Bad("StatsInterval", c.statsInterval, "want 100ms or more")
	}
	errs.Add(c.conn.Validate())
	return c, errs.Err()
}
