package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
)

// Scenario names what a bench run measures.
type Scenario string

// The scenarios.
const (
	// Produce submits tasks with the producer, side by side with raw
	// franz-go producing the same records.
	Produce Scenario = "produce"
	// Process pre-loads a queue and drains it with workers, side by side
	// with franz-go's GroupTransactSession copy loop and, for
	// exactly-once, the at-least-once guarantee.
	Process Scenario = "process"
	// E2E produces and processes at once, at Rate or flat out.
	E2E Scenario = "e2e"
	// Delay submits tasks due within MaxDelay and runs the delay service.
	Delay Scenario = "delay"
	// Chaos runs worker subprocesses and SIGKILLs and restarts them (and
	// with KillBroker the broker process) at random.
	Chaos Scenario = "chaos"
)

// Scenarios lists every scenario.
var Scenarios = []Scenario{Produce, Process, E2E, Delay, Chaos}

// ParseScenario reads a scenario by name.
func ParseScenario(s string) (Scenario, error) {
	for _, sc := range Scenarios {
		if string(sc) == s {
			return sc, nil
		}
	}
	return "", fmt.Errorf("bench: scenario %q: use produce, process, e2e, delay or chaos", s)
}

// ErrConfig is wrapped by every invalid option Run refuses.
var ErrConfig = errors.New("invalid bench option")

// Defaults of the options.
const (
	// DefaultTasks is sized for a small machine: a scenario with its
	// baselines finishes within a minute or two on two cores.
	DefaultTasks          = 200_000
	DefaultSize           = 100
	DefaultPartitions     = 8
	DefaultConcurrency    = 32
	DefaultCommitInterval = 100 * time.Millisecond
	DefaultMaxDelay       = 10 * time.Second
	DefaultKillInterval   = time.Second
	// MinSize is the smallest payload: its first 8 bytes carry the
	// submission time, for latency.
	MinSize = 8
	// MaxSize keeps a task with its headers below the broker's 1 MiB
	// record limit.
	MaxSize = 512 << 10
	// MaxTasks bounds the memory of the verification (a few bytes per
	// task).
	MaxTasks = 50_000_000
)

// Options configure Run. The zero value of a field means its default.
type Options struct {
	Scenario Scenario
	// Conn reaches the brokers. With no Brokers the bench starts its own:
	// an embedded broker in its process on a temporary data dir, or for
	// Chaos with KillBroker an "onceq broker" subprocess (Binary) on a
	// temporary data dir and a fixed port, so that it can be restarted.
	Conn broker.Conn
	// Tasks is the number of distinct task IDs. Default DefaultTasks.
	Tasks int
	// Size is the payload size in bytes, MinSize to MaxSize. Default 100.
	Size int
	// Partitions of the queues the bench creates. Default 8.
	Partitions int
	// Workers is the number of workers: goroutines in the bench's process
	// for Process and E2E, delay service instances for Delay, "onceq
	// worker" subprocesses for Chaos. Default 3 for Chaos, else 1.
	Workers int
	// Concurrency and CommitInterval are the workers'. Defaults 32 and
	// 100ms, the worker's own.
	Concurrency    int
	CommitInterval time.Duration
	// Guarantee of the workers of Process and E2E. Default exactly-once;
	// Chaos runs exactly-once only.
	Guarantee consumer.Guarantee
	// Duplicates is the fraction of IDs submitted a second time, 0 to 1.
	Duplicates float64
	// Rate is the offered load in tasks per second for E2E, Delay and
	// Chaos. Default 0: flat out, except for Chaos, whose default spreads
	// the submissions over chaosKillSpan kill intervals (6 s at the default
	// interval), so that enough kills land while tasks flow however fast
	// the machine drains them.
	Rate int
	// Seed seeds the load (payloads, order, duplicates, delays) and the
	// chaos (kill times and victims). Default 0: one from the clock,
	// reported so that a run can be replayed.
	Seed uint64
	// MaxDelay is the Delay scenario's largest delay: delays are uniform
	// from 0 to it. Default 10s.
	MaxDelay time.Duration
	// KillBroker makes Chaos kill and restart the broker process too. It
	// needs the bench's own broker (no Conn.Brokers).
	KillBroker bool
	// KillInterval is Chaos's mean time between kills; each wait is
	// uniform from half to one and a half of it. Default 1s. A run with
	// fewer than 3 kills (or with KillBroker no broker kill) fails: it
	// tested no crashes.
	KillInterval time.Duration
	// NoBaselines skips the baseline runs.
	NoBaselines bool
	// Binary is the onceq executable that Chaos runs workers and the
	// broker with. Default: this process's executable.
	Binary string
	// Progress receives progress while the bench runs. Default none.
	Progress *Progress
	// Logger receives the components' warnings. Default: discarded.
	Logger *slog.Logger
	// Tamper, when set, edits the records the verifier read before it
	// checks them. It exists for tests that prove a lost or duplicated
	// output fails verification; never set it otherwise.
	Tamper func([]*kgo.Record) []*kgo.Record
}

// withDefaults fills in defaults and checks the result.
func (o Options) withDefaults() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("bench: %s: %w", fmt.Sprintf(format, args...), ErrConfig)
	}
	if _, err := ParseScenario(string(o.Scenario)); err != nil {
		return o, fmt.Errorf("%w: %w", err, ErrConfig)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Tasks, DefaultTasks)
	def(&o.Size, DefaultSize)
	def(&o.Partitions, DefaultPartitions)
	def(&o.Concurrency, DefaultConcurrency)
	if o.Scenario == Chaos {
		def(&o.Workers, 3)
	}
	def(&o.Workers, 1)
	if o.CommitInterval == 0 {
		o.CommitInterval = DefaultCommitInterval
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.KillInterval == 0 {
		o.KillInterval = DefaultKillInterval
	}
	if o.Scenario == Chaos && o.Rate == 0 {
		o.Rate = chaosRate(o.Tasks, o.KillInterval)
	}
	if o.Guarantee == "" {
		o.Guarantee = consumer.ExactlyOnce
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.Tasks < 1 || o.Tasks > MaxTasks:
		return bad("tasks %d: want 1 to %d", o.Tasks, MaxTasks)
	case o.Size < MinSize || o.Size > MaxSize:
		return bad("size %d: want %d to %d bytes (the first %d carry the submission time)", o.Size, MinSize, MaxSize, MinSize)
	case o.Partitions < 1 || o.Partitions > 1000:
		return bad("partitions %d: want 1 to 1000", o.Partitions)
	case o.Workers < 1 || o.Workers > 64:
		return bad("workers %d: want 1 to 64", o.Workers)
	case o.Concurrency < 1 || o.Concurrency > 10_000:
		return bad("concurrency %d: want 1 to 10000", o.Concurrency)
	case o.CommitInterval < time.Millisecond || o.CommitInterval > time.Minute:
		return bad("commit interval %v: want 1ms to 1m", o.CommitInterval)
	case !(o.Duplicates >= 0 && o.Duplicates <= 1):
		return bad("duplicates %v: want a fraction from 0 to 1", o.Duplicates)
	case o.Rate < 0:
		return bad("rate %d: want 0 (flat out) or more", o.Rate)
	case o.MaxDelay < time.Millisecond || o.MaxDelay > time.Hour:
		return bad("max delay %v: want 1ms to 1h", o.MaxDelay)
	case o.KillInterval < 100*time.Millisecond:
		return bad("kill interval %v: want 100ms or more", o.KillInterval)
	case o.KillBroker && o.Scenario != Chaos:
		return bad("kill broker: only the chaos scenario kills the broker")
	case o.KillBroker && len(o.Conn.Brokers) > 0:
		return bad("kill broker: needs the bench's own broker: give no brokers")
	}
	if _, err := consumer.ParseGuarantee(string(o.Guarantee)); err != nil {
		return o, fmt.Errorf("%w: %w", err, ErrConfig)
	}
	if o.Scenario == Chaos && o.Guarantee != consumer.ExactlyOnce {
		return bad("guarantee %s: chaos verifies exactly-once: its workers run exactly-once", o.Guarantee)
	}
	if err := o.Conn.Validate(); err != nil {
		return o, err
	}
	if o.Scenario == Chaos {
		if o.Binary == "" {
			exe, err := os.Executable()
			if err != nil {
				return bad("binary: finding this executable: %v: give the onceq binary", err)
			}
			o.Binary = exe
		}
		if fi, err := os.Stat(o.Binary); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return bad("binary %q: not an executable: give the onceq binary that runs the workers", o.Binary)
		}
	}
	return o, nil
}
