package producer

import (
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

// ErrConfig is wrapped by every invalid option New refuses.
var ErrConfig = errors.New("invalid producer option")

// Defaults of the options.
const (
	// DefaultLinger is how long a partition's batch waits for more tasks
	// before it is sent. See Linger.
	DefaultLinger = 5 * time.Millisecond
	// DefaultMaxBufferedRecords bounds the tasks submitted and not yet
	// acknowledged. See MaxBufferedRecords.
	DefaultMaxBufferedRecords = 100_000
	// DefaultTxTimeout is the broker's limit on one Tx. See TxTimeout.
	DefaultTxTimeout = 20 * time.Second
	// DefaultRecords: tasks are recorded from their submission. See
	// Records.
	DefaultRecords = true
)

// An Opt configures a Producer. Options are applied in order; New checks
// the result once.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	conn               broker.Conn
	clientID           string
	linger             time.Duration
	maxBuffered        int
	defaultMaxAttempts int
	defaultTimeout     time.Duration
	defaultPriority    int
	createPartitions   int32
	planner            *delay.Planner
	buckets            []time.Duration
	maxMessageBytes    int
	registerer         prometheus.Registerer
	aggregate          bool // !MetricsPerQueue
	log                *slog.Logger
	now                func() time.Time
	realClock          bool // now is time.Now: one clock read per task
	txnID              string
	txTimeout          time.Duration
	records            bool
	errs               onceq.OptionErrors
}

func defaultConfig() config {
	return config{
		errs:            onceq.OptionErrors{Pkg: "producer", Kind: ErrConfig},
		linger:          DefaultLinger,
		maxBuffered:     DefaultMaxBufferedRecords,
		maxMessageBytes: onceq.DefaultMaxMessageBytes,
		log:             slog.New(slog.DiscardHandler),
		now:             time.Now,
		realClock:       true,
		txTimeout:       DefaultTxTimeout,
		records:         DefaultRecords,
	}
}

func (c *config) bad(option string, value any, want string, args ...any) {
	c.errs.Bad(option, value, want, args...)
}

// Conn sets how to reach the brokers: seeds, TLS and SASL. Default
// broker.Conn{}, plaintext to broker.DefaultBrokers.
func Conn(c broker.Conn) Opt { return optFunc(func(cfg *config) { cfg.conn = c }) }

// Brokers sets the seed brokers, host:port each, keeping the rest of Conn.
func Brokers(addrs ...string) Opt {
	return optFunc(func(cfg *config) { cfg.conn.Brokers = addrs })
}

// ClientID names the producer to the brokers. Default the Conn's ClientID,
// or "onceq".
func ClientID(id string) Opt { return optFunc(func(cfg *config) { cfg.clientID = id }) }

// Linger sets how long a partition's batch waits for more tasks before it
// is sent. Default DefaultLinger (5ms): under load SubmitAsync fills bigger batches, which
// raised throughput by a third or more over no linger on the embedded
// broker, at the cost of up to 5ms more latency for SubmitAsync's
// callbacks. Submit does not wait for it: it sends its partition's batch
// at once. Zero sends every batch as soon as a request can go out.
func Linger(d time.Duration) Opt {
	return optFunc(func(cfg *config) {
		if d < 0 {
			cfg.bad("Linger", d, "want zero or positive")
		}
		cfg.linger = d
	})
}

// Records says whether every task is recorded in its queue's task
// records topic (broker.RecordsTopic) from its submission: pending, or
// scheduled with its due time when delayed, before Submit returns or the
// callback of SubmitAsync, SubmitMany or Tx runs. With them, readers of
// the records (package inspect, onceq task get, queue stats, the console)
// know a task before any worker ran it, and a cancel (control.Cancel,
// onceq task cancel) finds it, so that it never runs. The producer
// creates the records topic when no worker has yet, with the queue's
// partitions.
//
// A record is a JSON line of about 150 bytes, batched: a Kafka record
// per few thousand tasks under load. Off, for pure streams whose tasks
// nobody looks up: a task then has no record until a worker runs it.
// Default DefaultRecords (on). Tx.SubmitPending records its task either
// way.
func Records(on bool) Opt { return optFunc(func(cfg *config) { cfg.records = on }) }

// MaxBufferedRecords bounds the tasks submitted and not yet acknowledged.
// When it is reached, Submit and SubmitAsync block until tasks are
// acknowledged or their context ends. Default
// DefaultMaxBufferedRecords (100,000).
func MaxBufferedRecords(n int) Opt {
	return optFunc(func(cfg *config) {
		if n < 1 {
			cfg.bad("MaxBufferedRecords", n, "want 1 or more")
		}
		cfg.maxBuffered = n
	})
}

// TaskMaxAttempts is stamped on tasks that have no MaxAttempts: zero
// (the worker's default) or 1 to onceq.MaxAttemptCount. Default zero: such
// tasks carry none and the worker's default applies.
func TaskMaxAttempts(n int) Opt {
	return optFunc(func(cfg *config) {
		if n < 0 || n > onceq.MaxAttemptCount {
			cfg.bad("TaskMaxAttempts", n, "want zero (the worker's default) or 1 to %d", onceq.MaxAttemptCount)
		}
		cfg.defaultMaxAttempts = n
	})
}

// TaskPriority is stamped on tasks that have no Priority (zero): 0 to
// onceq.MaxPriority, higher first. Default zero: such tasks carry none and
// run at the lowest priority. A task's own priority, from 1 up, is kept.
func TaskPriority(p int) Opt {
	return optFunc(func(cfg *config) {
		if onceq.ValidatePriority(p) != nil {
			cfg.bad("TaskPriority", p, "want %s", onceq.PriorityRange)
		}
		cfg.defaultPriority = p
	})
}

// TaskTimeout is stamped on tasks that have no Timeout (time-to-run of
// one attempt). Default zero: the worker's default applies.
func TaskTimeout(d time.Duration) Opt {
	return optFunc(func(cfg *config) {
		if d < 0 || d%time.Millisecond != 0 {
			cfg.bad("TaskTimeout", d, "want zero or a positive whole number of milliseconds")
		}
		cfg.defaultTimeout = d
	})
}

// CreateQueues creates missing queues with the given partitions (1 to
// broker.MaxPartitions) on first use. By default (zero) a task for a queue that does not exist is refused
// with an error naming the queue and how to create it ("onceq topics
// create QUEUE"): a typo in a queue name then fails at once instead of
// creating a queue no worker reads. Delay bucket topics, onceq's own, are
// always created when missing.
func CreateQueues(partitions int32) Opt {
	return optFunc(func(cfg *config) {
		if partitions < 0 || partitions > broker.MaxPartitions {
			cfg.bad("CreateQueues", partitions, "want zero (refuse missing queues) or a partition count from 1 to %d", broker.MaxPartitions)
		}
		cfg.createPartitions = partitions
	})
}

// Planner sets the delay ladder the producer expects. Delayed tasks route
// by the cluster's ladder (delay.ClusterPlanner), read by the first of
// them: a different one is refused, with what to do, and on a cluster
// whose ladder was never set, this one is set. Default: the cluster's
// ladder, delay.DefaultBuckets when none was set. Planner and Buckets
// replace each other.
func Planner(p *delay.Planner) Opt {
	return optFunc(func(cfg *config) {
		if p == nil {
			cfg.bad("Planner", nil, "nil planner: leave it unset for the cluster's ladder")
		}
		cfg.planner, cfg.buckets = p, nil
	})
}

// Buckets sets the delay ladder, as Planner(delay.NewPlanner(buckets)).
func Buckets(buckets ...time.Duration) Opt {
	return optFunc(func(cfg *config) { cfg.planner, cfg.buckets = nil, buckets })
}

// MaxMessageBytes is the largest record the brokers accept (Kafka's
// message.max.bytes). Larger tasks are refused before they are sent, with
// onceq.ErrTooLarge. It also bounds a batch. Default
// onceq.DefaultMaxMessageBytes (1 MiB).
func MaxMessageBytes(n int) Opt {
	return optFunc(func(cfg *config) {
		if n < 1024 || n > 1<<30 {
			cfg.bad("MaxMessageBytes", n, "want 1024 to %d", 1<<30)
		}
		cfg.maxMessageBytes = n
	})
}

// Registerer registers the producer's metrics: onceq_tasks_submitted_total,
// onceq_submit_errors_total and onceq_submit_duration_seconds. Producers
// sharing a registerer share the metrics. Default none: the metrics are
// kept but not exported, so tests can create many producers.
func Registerer(r prometheus.Registerer) Opt {
	return optFunc(func(cfg *config) { cfg.registerer = r })
}

// MetricsPerQueue says whether the producer's metrics have a series per
// queue. Off, every series has queue "*", summed over the queues: a
// producer of thousands of queues keeps its series to a few, as the
// worker's MetricsPerQueue does. Default on.
func MetricsPerQueue(on bool) Opt {
	return optFunc(func(cfg *config) { cfg.aggregate = !on })
}

// Logger receives the producer's logs: topics it creates, transactions it
// aborts, the client's warnings. Default: discarded.
func Logger(l *slog.Logger) Opt {
	return optFunc(func(cfg *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		cfg.log = l
	})
}

// Now sets the clock that resolves delays and stamps enqueue times. For
// tests. Default time.Now.
func Now(now func() time.Time) Opt {
	return optFunc(func(cfg *config) {
		if now == nil {
			cfg.bad("Now", nil, "nil clock: leave it unset for time.Now")
		}
		cfg.now, cfg.realClock = now, false
	})
}

// TransactionalID sets the Kafka transactional ID Tx uses. Default
// "onceq-producer-" and a UUID, new for every producer.
//
// A producer that crashes inside Tx leaves its transaction open until the
// broker aborts it after TxTimeout, and read_committed consumers of the
// partitions it wrote wait for that. A producer restarted with the same
// stable ID fences the old transaction at once instead. Two live producers
// must never share an ID: the newer one fences the older.
func TransactionalID(id string) Opt {
	return optFunc(func(cfg *config) {
		if id == "" {
			cfg.bad("TransactionalID", nil, "empty: leave it unset to have one generated")
		}
		cfg.txnID = id
	})
}

// TxTimeout is how long one Tx may stay open on the broker, from its first
// task to its commit, before the broker aborts it. Default DefaultTxTimeout
// (20s): long
// enough for a million small tasks, short enough that a crashed producer
// does not hold back read_committed readers for long (see
// TransactionalID). The broker caps it (transaction.max.timeout.ms).
func TxTimeout(d time.Duration) Opt {
	return optFunc(func(cfg *config) {
		if d < time.Second {
			cfg.bad("TxTimeout", d, "want 1s or more")
		}
		cfg.txTimeout = d
	})
}

// build applies opts and checks the result.
func build(opts []Opt) (config, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o == nil {
			c.errs.Add(errors.New("producer: a nil option"))
			continue
		}
		o.apply(&c)
	}
	if c.clientID != "" {
		c.conn.ClientID = c.clientID
	}
	c.errs.Add(c.conn.Validate())
	if c.planner == nil && c.buckets != nil {
		if p, err := delay.NewPlanner(c.buckets); err != nil {
			c.bad("Buckets", delay.FormatLadder(c.buckets), "%v", err)
		} else {
			c.planner = p
		}
	}
	if c.txnID == "" {
		c.txnID = "onceq-producer-" + uuid.NewString()
	}
	return c, c.errs.Err()
}

// MaxMessageBytes returns the record size limit the producer validates
// tasks against (the MaxMessageBytes option).
func (p *Producer) MaxMessageBytes() int { return p.cfg.maxMessageBytes }
