package periodic

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

// ErrConfig is wrapped by every invalid option NewScheduler refuses.
var ErrConfig = errors.New("invalid scheduler option")

// Defaults of the options.
const (
	// DefaultLead is how long before its tick a tick's task is submitted.
	// See Lead.
	DefaultLead = 2 * time.Second
	// DefaultMaxCatchUp bounds the missed ticks of a schedule submitted
	// at once. See MaxCatchUp.
	DefaultMaxCatchUp = 100
)

// Bounds of Lead.
const (
	MinLead = 100 * time.Millisecond
	MaxLead = time.Hour
)

// An Opt configures a Scheduler. Options are applied in order;
// NewScheduler checks the result once.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	conn       broker.Conn
	log        *slog.Logger
	registerer prometheus.Registerer
	planner    *delay.Planner
	lead       time.Duration
	maxCatchUp int
	errs       onceq.OptionErrors
}

// Conn sets how to reach the brokers. Default broker.Conn{}: plaintext
// to broker.DefaultBrokers.
func Conn(c broker.Conn) Opt { return optFunc(func(cfg *config) { cfg.conn = c }) }

// Logger receives the scheduler's logs: schedules it finds, changed and
// removed, ticks it skips or catches up, submissions that fail. Default:
// discarded.
func Logger(l *slog.Logger) Opt {
	return optFunc(func(cfg *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		cfg.log = l
	})
}

// Registerer registers the scheduler's metrics: onceq_periodic_schedules,
// onceq_periodic_ticks_submitted_total, onceq_periodic_ticks_late_total,
// onceq_periodic_ticks_skipped_total, onceq_periodic_submit_errors_total
// and onceq_periodic_last_tick_timestamp_seconds, and its producer's
// (onceq_tasks_submitted_total, ...). One scheduler per registerer.
// Default none: the metrics are kept but not exported.
func Registerer(r prometheus.Registerer) Opt {
	return optFunc(func(cfg *config) { cfg.registerer = r })
}

// Planner sets the delay ladder the scheduler expects; the ticks' tasks
// route by the cluster's ladder, which must be the same (see
// producer.Planner). Default: the cluster's ladder.
func Planner(p *delay.Planner) Opt {
	return optFunc(func(cfg *config) {
		if p == nil {
			cfg.errs.Bad("Planner", nil, "nil planner: leave it unset for the cluster's ladder")
		}
		cfg.planner = p
	})
}

// Lead is how long before its tick a tick's task is submitted, from
// MinLead to MaxLead: its due time is the tick, so it waits in the delay
// service and runs on time, never early. A tick that a scheduler comes to
// more than Lead after it, because every scheduler was down or cut off
// from the brokers, is missed: its schedule's Missed policy decides. Default
// DefaultLead (2s).
func Lead(d time.Duration) Opt {
	return optFunc(func(cfg *config) {
		if d < MinLead || d > MaxLead {
			cfg.errs.Bad("Lead", d, "want %v to %v", MinLead, MaxLead)
		}
		cfg.lead = d
	})
}

// MaxCatchUp bounds the missed ticks of a schedule with the CatchUp
// policy that a scheduler submits: the latest MaxCatchUp; the older ones
// are skipped, with a log line and onceq_periodic_ticks_skipped_total.
// At least 1. Default DefaultMaxCatchUp (100).
func MaxCatchUp(n int) Opt {
	return optFunc(func(cfg *config) {
		if n < 1 {
			cfg.errs.Bad("MaxCatchUp", n, "want 1 or more (a schedule with the SkipMissed policy catches up on none)")
		}
		cfg.maxCatchUp = n
	})
}

func buildConfig(opts []Opt) (config, error) {
	c := config{
		log:        slog.New(slog.DiscardHandler),
		lead:       DefaultLead,
		maxCatchUp: DefaultMaxCatchUp,
		errs:       onceq.OptionErrors{Pkg: "periodic", Kind: ErrConfig},
	}
	onceq.ApplyOptions(&c.errs, opts, func(o Opt) { o.apply(&c) })
	c.errs.Add(c.conn.Validate())
	return c, c.errs.Err()
}
