package inspect

import (
	"errors"
	"log/slog"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// ErrConfig is wrapped by every option Open refuses.
var ErrConfig = errors.New("invalid inspect option")

// Defaults of the options.
const (
	// DefaultRetention is how long a finished task stays in the view:
	// the workers' default result retention and dedup window.
	DefaultRetention = broker.DefaultRecordsRetention
	// DefaultLoadTimeout bounds the first load of a queue's records.
	DefaultLoadTimeout = time.Minute
)

// An Opt configures an Inspector.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	conn        broker.Conn
	dir         string
	log         *slog.Logger
	retention   time.Duration
	loadTimeout time.Duration
	now         func() time.Time
}

// Conn sets how to reach the brokers. Default: broker.DefaultBrokers,
// plaintext.
func Conn(c broker.Conn) Opt { return optFunc(func(cfg *config) { cfg.conn = c }) }

// Dir keeps the view in a Pebble store in dir, so that a restarted
// process reads only the records written since it stopped. Default ""
// keeps it in memory: every start reads the records topics from their
// start.
func Dir(dir string) Opt { return optFunc(func(cfg *config) { cfg.dir = dir }) }

// Logger receives the inspector's warnings (a malformed record, a view
// rebuilt). Default: discarded.
func Logger(l *slog.Logger) Opt { return optFunc(func(cfg *config) { cfg.log = l }) }

// Retention hides and then forgets tasks whose last transition is older:
// set it to the workers' --result-retention. Default DefaultRetention (7
// days).
func Retention(d time.Duration) Opt { return optFunc(func(cfg *config) { cfg.retention = d }) }

// LoadTimeout bounds the first load of a queue's records, which every
// first query of a queue waits for. Default DefaultLoadTimeout (1m).
func LoadTimeout(d time.Duration) Opt { return optFunc(func(cfg *config) { cfg.loadTimeout = d }) }

func build(opts []Opt) (config, error) {
	cfg := config{conn: broker.Conn{Brokers: []string{broker.DefaultBrokers}}, log: slog.New(slog.DiscardHandler),
		retention: DefaultRetention, loadTimeout: DefaultLoadTimeout, now: time.Now}
	errs := onceq.OptionErrors{Pkg: "inspect", Kind: ErrConfig}
	onceq.ApplyOptions(&errs, opts, func(o Opt) { o.apply(&cfg) })
	if cfg.log == nil {
		errs.Bad("Logger", nil, "a logger, not nil")
	}
	if cfg.retention < time.Minute {
		errs.Bad("Retention", cfg.retention, "want 1m or more")
	}
	if cfg.loadTimeout < time.Second {
		errs.Bad("LoadTimeout", cfg.loadTimeout, "want 1s or more")
	}
	errs.Add(cfg.conn.Validate())
	return cfg, errs.Err()
}
