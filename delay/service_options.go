package delay

import (
	"errors"
	"fmt"
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
	// transactions. See WithCommitInterval.
	DefaultCommitInterval = 10 * time.Millisecond
	// DefaultMaxHeld bounds the records held in memory. See WithMaxHeld.
	DefaultMaxHeld = 200_000
	// DefaultSessionTimeout is the group session timeout.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultTransactionTimeout is the broker's limit on one transaction.
	DefaultTransactionTimeout = 8 * time.Second
	// DefaultStatsInterval is how often the waiting counts are refreshed.
	DefaultStatsInterval = 5 * time.Second
)

// A ServiceOpt configures a Service. Options are applied in order;
// NewService checks the result once.
type ServiceOpt interface{ apply(*serviceConfig) }

type serviceOptFunc func(*serviceConfig)

func (f serviceOptFunc) apply(c *serviceConfig) { f(c) }

type serviceConfig struct {
	conn           broker.Conn
	planner        *Planner
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
	errs           []error
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
	}
}

func (c *serviceConfig) bad(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("delay: %s: %w", fmt.Sprintf(format, args...), ErrServiceConfig))
}

// WithConn sets how to reach the brokers. Default broker.Conn{}: plaintext
// to broker.DefaultBrokers.
func WithConn(c broker.Conn) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.conn = c })
}

// WithPlanner sets the bucket ladder. It must be the ladder the producers
// route with. Default DefaultPlanner(). The service creates missing bucket
// topics with BucketTopicConfigs and DefaultBucketPartitions. A ladder may
// gain buckets at any time; a bucket taken off the ladder is no longer
// read, so keep it until "onceq delay stats" shows it empty.
func WithPlanner(p *Planner) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) {
		if p == nil {
			cfg.bad("WithPlanner: nil planner")
		}
		cfg.planner = p
	})
}

// WithGroup sets the consumer group. Instances of one group share the
// bucket partitions. Default DefaultGroup ("onceq-delay").
func WithGroup(g string) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.group = g })
}

// WithLogger receives the service's logs. Default: discarded.
func WithLogger(l *slog.Logger) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		cfg.log = l
	})
}

// WithRegisterer registers the service's metrics: onceq_delayed_tasks,
// onceq_delay_lateness_seconds, onceq_delay_moves_total,
// onceq_delay_due_within and onceq_delay_held_tasks. One service per
// registerer. Default none: the metrics are kept but not exported.
func WithRegisterer(r prometheus.Registerer) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.registerer = r })
}

// WithStateDir sets the directory that keeps the instance ID (file
// delay-instance-id), created on first start. A worker may pass its own
// checkpoint dir. Default none: a new instance ID on every start, so a
// restarted instance cannot fence its predecessor's open transaction and
// read_committed readers of the buckets wait for the broker to time it out.
func WithStateDir(dir string) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.stateDir = dir })
}

// WithInstanceID fixes the instance ID, from which the transactional ID
// and the static group membership derive. Two live instances of one group
// must never share it. Default: kept in the state dir (WithStateDir).
func WithInstanceID(id string) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) {
		if id == "" {
			cfg.bad("WithInstanceID: empty: leave it unset to keep one in the state dir")
		}
		cfg.instanceID = id
	})
}

// WithCommitInterval is the shortest time between two transactions. A
// released record waits at most this long for its transaction, so it
// bounds the lateness the service adds; shorter costs more transactions
// per second. Default 10ms.
func WithCommitInterval(d time.Duration) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) {
		if d < time.Millisecond || d > time.Minute {
			cfg.bad("commit interval %v: want 1ms to 1m", d)
		}
		cfg.commitInterval = d
	})
}

// WithMaxHeld bounds the records held in memory: read ahead of their
// release (see Planner.ReadAhead) and not yet moved. When it is reached the
// service reads no further until records move on, so memory stays bounded
// however many tasks wait; records released meanwhile may be late. Default
// 200,000.
func WithMaxHeld(n int) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) {
		if n < 1 {
			cfg.bad("max held %d: want 1 or more", n)
		}
		cfg.maxHeld = n
	})
}

// WithSessionTimeout is the group session timeout: how long a silent
// instance keeps its partitions. Default 10s.
func WithSessionTimeout(d time.Duration) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.sessionTimeout = d })
}

// WithTransactionTimeout bounds an open transaction; the broker aborts it
// after that. It must be below the session timeout. Default 8s.
func WithTransactionTimeout(d time.Duration) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) { cfg.txnTimeout = d })
}

// WithStatsInterval is how often onceq_delayed_tasks and
// onceq_delay_due_within are refreshed from the brokers. Default 5s.
func WithStatsInterval(d time.Duration) ServiceOpt {
	return serviceOptFunc(func(cfg *serviceConfig) {
		if d < 100*time.Millisecond {
			cfg.bad("stats interval %v: want 100ms or more", d)
		}
		cfg.statsInterval = d
	})
}

// buildService applies opts and checks the result.
func buildService(opts []ServiceOpt) (serviceConfig, error) {
	c := defaultServiceConfig()
	for _, o := range opts {
		if o == nil {
			c.bad("nil option")
			continue
		}
		o.apply(&c)
	}
	if err := c.conn.Validate(); err != nil {
		c.errs = append(c.errs, fmt.Errorf("delay: %w", err))
	}
	if c.planner == nil {
		c.planner = DefaultPlanner()
	}
	if err := onceq.ValidateTopic(c.group); err != nil {
		c.bad("group %q: use letters, digits, '.', '_' or '-'", c.group)
	}
	if c.txnTimeout < time.Second || c.txnTimeout >= c.sessionTimeout {
		c.bad("transaction timeout %v: want 1s or more and below the session timeout %v", c.txnTimeout, c.sessionTimeout)
	}
	return c, errors.Join(c.errs...)
}
