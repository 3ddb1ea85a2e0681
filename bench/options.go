package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
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
	// MaxLaneQueues bounds Options.LaneQueues.
	MaxLaneQueues = 10_000
	// MaxTasks bounds the memory of the verification (a few bytes per
	// task).
	MaxTasks = 50_000_000
	// DefaultWork is the handlers' work per task: none, so that a run
	// measures onceq itself.
	DefaultWork = 0
	// MaxWork bounds Work and Slow.Duration. The bench's workers run tasks
	// with the worker's default time-to-run of 30s: a longer sleep would
	// time out and run again, and the bench would measure retries.
	MaxWork = 20 * time.Second
)

// ProfileScenarios are the scenarios whose handlers run in the bench's
// process and so take a handler-time profile (Options.Work and
// Options.Slow). Produce and Delay run no handler; Chaos runs "onceq
// worker" processes with the count: handler.
var ProfileScenarios = []Scenario{Process, E2E}

// Slow is the slow part of a handler-time profile: Percent of the tasks
// sleep Duration instead of Options.Work. Which tasks are slow follows
// from the seed alone, so every run of one invocation (the exactly-once
// run and its at-least-once baseline) and every replay with the same seed
// have the same slow tasks. The zero value is none.
type Slow struct {
	// Percent of the distinct tasks, 0 to 100, rounded to a whole number
	// of tasks and at least one when above 0.
	Percent float64
	// Duration each slow task's handler sleeps, 0 to MaxWork.
	Duration time.Duration
}

// String formats s as ParseSlow reads it: "P%:D", or "none".
func (s Slow) String() string {
	if s == (Slow{}) {
		return "none"
	}
	return strconv.FormatFloat(s.Percent, 'f', -1, 64) + "%:" + s.Duration.String()
}

const slowSyntax = "want P%:D, the percentage of the tasks (0 to 100) that sleep D instead of the work, for example 1%:1s"

// ParseSlow reads a Slow written "P%:D", for example "1%:1s" (1% of the
// tasks sleep a second) or "0.5%:250ms". "none" and "" are the zero Slow.
func ParseSlow(s string) (Slow, error) {
	if s == "" || s == "none" {
		return Slow{}, nil
	}
	p, d, ok := strings.Cut(s, ":")
	p, pct := strings.CutSuffix(p, "%")
	if !ok || !pct {
		return Slow{}, fmt.Errorf("bench: slow %q: %s", s, slowSyntax)
	}
	percent, err := strconv.ParseFloat(p, 64)
	if err != nil {
		return Slow{}, fmt.Errorf("bench: slow %q: percentage %q is not a number: %s", s, p, slowSyntax)
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		return Slow{}, fmt.Errorf("bench: slow %q: duration %q is not a duration: %s", s, d, slowSyntax)
	}
	sl := Slow{Percent: percent, Duration: dur}
	if err := sl.check(); err != nil {
		return Slow{}, err
	}
	return sl, nil
}

// check reports a Slow out of range.
func (s Slow) check() error {
	switch {
	case !(s.Percent >= 0 && s.Percent <= 100):
		return fmt.Errorf("bench: slow %s: percentage %v: want 0 to 100, for example 1%%:1s", s, s.Percent)
	case s.Duration < 0 || s.Duration > MaxWork:
		return fmt.Errorf("bench: slow %s: duration %v: want 0 to %v (the tasks' time-to-run is 30s), for example 1%%:1s", s, s.Duration, MaxWork)
	}
	return nil
}

// tasks is how many of n distinct tasks are slow.
func (s Slow) tasks(n int) int {
	if s.Percent == 0 {
		return 0
	}
	return max(1, min(n, int(math.Round(s.Percent/100*float64(n)))))
}

// ParseWork reads the work of a handler-time profile, a duration from 0
// to MaxWork such as "20ms".
func ParseWork(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bench: work %q: want a duration from 0 to %v, for example 20ms", s, MaxWork)
	}
	if err := checkWork(d); err != nil {
		return 0, err
	}
	return d, nil
}

func checkWork(d time.Duration) error {
	if d < 0 || d > MaxWork {
		return fmt.Errorf("bench: work %v: want a duration from 0 to %v (the tasks' time-to-run is 30s), for example 20ms", d, MaxWork)
	}
	return nil
}

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
	// Those carry IDs a client chose (idempotency keys, which workers
	// remember); the others are marked generated, as the producer's own.
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
	// LaneQueues spreads Chaos's tasks over this many lane queues of its
	// queue's topic, the lane (<in>/q-0 to <in>/q-<N-1>, by task index),
	// run by workers of the pattern <in>/q-[0-9]+. Default 0: the tasks
	// are the queue's own.
	LaneQueues int
	// KillBroker makes Chaos kill and restart the broker process too. It
	// needs the bench's own broker (no Conn.Brokers).
	KillBroker bool
	// KillInterval is Chaos's mean time between kills; each wait is
	// uniform from half to one and a half of it. Default 1s. A run with
	// fewer than 3 kills (or with KillBroker no broker kill) fails: it
	// tested no crashes.
	KillInterval time.Duration
	// Work and Slow are the handler-time profile of Process and E2E (see
	// ProfileScenarios; other scenarios refuse them): each handler run
	// sleeps Work, or Slow.Duration for the slow tasks, before it emits its
	// output, and returns the context's error if the context ends first.
	// The primary run and the worker baselines have the same profile; the
	// copy loop baseline runs no handler and does no work. Defaults 0
	// (DefaultWork) and none: the handler returns at once.
	Work time.Duration
	Slow Slow
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
	case (o.Work != 0 || o.Slow != Slow{}) && o.Scenario == Chaos:
		return bad("work %v, slow %s: chaos runs the count: handler in \"onceq worker\" processes: a handler-time profile applies to process and e2e", o.Work, o.Slow)
	case (o.Work != 0 || o.Slow != Slow{}) && !slices.Contains(ProfileScenarios, o.Scenario):
		return bad("work %v, slow %s: the %s scenario runs no handler: a handler-time profile applies to process and e2e", o.Work, o.Slow, o.Scenario)
	case o.LaneQueues < 0 || o.LaneQueues > MaxLaneQueues:
		return bad("lane queues %d: want 0 to %d", o.LaneQueues, MaxLaneQueues)
	case o.LaneQueues > 0 && o.Scenario != Chaos:
		return bad("lane queues: only the chaos scenario spreads its tasks over lane queues")
	case o.KillBroker && o.Scenario != Chaos:
		return bad("kill broker: only the chaos scenario kills the broker")
	case o.KillBroker && len(o.Conn.Brokers) > 0:
		return bad("kill broker: needs the bench's own broker: give no brokers")
	}
	if err := checkWork(o.Work); err != nil {
		return o, fmt.Errorf("%w: %w", err, ErrConfig)
	}
	if err := o.Slow.check(); err != nil {
		return o, fmt.Errorf("%w: %w", err, ErrConfig)
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
