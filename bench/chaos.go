package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// runChaos runs the load through Workers "onceq worker" subprocesses
// (count: handler, one group, a checkpoint dir each) while it SIGKILLs one
// of them, chosen at random, every KillInterval or so and restarts it on
// the same dir; with KillBroker the second kill and every third after it
// is the broker process instead, restarted on its data dir and address. Kill times and victims
// follow the seed. Latency is submission to the output's visibility to a
// read_committed reader. At the end a fresh reader and the run counters
// must show every task exactly once.
func runChaos(ctx context.Context, e *env, l *load, seed uint64) ([]RunResult, *ChaosStats, error) {
	in, out, group := e.name("in"), e.name("out"), e.name("group")
	if err := e.createTopics(ctx, in, out); err != nil {
		return nil, nil, err
	}
	c := &chaos{e: e, args: e.workerArgs(group, in, out), stats: &ChaosStats{}}
	for i := range e.o.Workers {
		s := &slot{dir: e.dir(fmt.Sprintf("worker-%d", i)), name: fmt.Sprintf("worker %d", i)}
		if err := c.start(s); err != nil {
			c.stopAll()
			return nil, nil, err
		}
		c.slots = append(c.slots, s)
	}
	defer c.stopAll()

	latency := newRecorder()
	var (
		mu     sync.Mutex
		seen   = make([]bool, len(l.want))
		unique atomic.Int64
		lastAt atomic.Int64
	)
	m := startMeter()
	t, err := startTailer(e.conn, out, func(r *kgo.Record, at time.Time) {
		var id string
		for _, h := range r.Headers {
			if h.Key == onceq.HeaderID {
				id = string(h.Value)
			}
		}
		i, ok := l.index(id)
		if !ok {
			return
		}
		mu.Lock()
		first := !seen[i]
		seen[i] = true
		mu.Unlock()
		if !first {
			return
		}
		if sub, ok := stamped(r.Value); ok {
			latency.record(at.Sub(sub))
		}
		unique.Add(1)
		lastAt.Store(at.UnixNano())
		m.add(1)
	})
	if err != nil {
		return nil, nil, err
	}
	defer t.stop()

	p, err := e.newProducer()
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	var submitErr atomic.Pointer[error]
	start := time.Now()
	go func() {
		if err := l.submitAll(ctx, p, l.order, in, e.o.Rate, laneQueues(l, in, e.o.LaneQueues), nil); err != nil {
			submitErr.Store(&err)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 3))
	end := e.o.Progress.phase("chaos: tasks visible once", int64(len(l.want)), unique.Load)
	err = c.loop(ctx, rng, func() (int64, error) {
		if p := submitErr.Load(); p != nil {
			return 0, *p
		}
		return unique.Load(), nil
	}, int64(len(l.want)))
	end()
	timeline := m.finish()
	if err != nil {
		return nil, c.stats, fmt.Errorf("%w\n%s", err, e.diagnose(ctx, l, group, in, out))
	}
	// A duplicate would come after the originals: give one time to land.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return nil, c.stats, err
	}
	if err := c.stopAll(); err != nil {
		return nil, c.stats, err
	}
	run := newRun(workerRunName(e.o.Guarantee)+" under chaos", false, len(l.order), l.size, time.Unix(0, lastAt.Load()).Sub(start))
	run.Timeline, run.Latency = timeline, latency.summary()
	run.Verification, err = e.verify(ctx, out, expectation{l: l, once: true, runs: true})
	if err == nil {
		c.enough(run.Verification)
		err = e.blameInput(ctx, in, l, run.Verification)
	}
	return []RunResult{run}, c.stats, err
}

// minKills is the fewest kills (with KillBroker, the fewest broker kills
// is one) that make a chaos run a test of crashes.
const minKills = 3

// chaosKillSpan is how many kill intervals a chaos run's submissions last
// by default. Each wait between kills is at most 1.5 intervals, so at
// least 4 kills land before the last task is submitted: flat out, a fast
// machine could drain the tasks between two kills and fail the run.
const chaosKillSpan = 2 * minKills

// chaosRate is the default pace of a chaos run of tasks.
func chaosRate(tasks int, every time.Duration) int {
	return max(1, int(float64(tasks)/(chaosKillSpan*every).Seconds()))
}

// enough fails v when the run ended before the chaos tested anything.
func (c *chaos) enough(v *Verification) {
	st := c.stats
	var short string
	switch {
	case st.WorkerKills+st.BrokerKills < minKills:
		short = fmt.Sprintf("only %d kills", st.WorkerKills+st.BrokerKills)
	case c.e.brk != nil && st.BrokerKills == 0:
		short = "no broker kill"
	default:
		return
	}
	v.Problems = append(v.Problems, short+": the run was too short to test crashes; offer a --rate (tasks per second) that spreads the tasks over longer, or lower --kill-interval")
	v.OK = false
}

// chaos keeps the worker subprocesses running and kills them.
type chaos struct {
	e       *env
	args    []string
	slots   []*slot
	stats   *ChaosStats
	stopped bool
}

// slot is one worker: restarted on the same checkpoint dir.
type slot struct {
	name, dir string
	p         *proc
}

func (c *chaos) start(s *slot) error {
	var env []string
	if pw := c.e.conn.SASL.Password; pw != "" {
		env = append(os.Environ(), "ONCEQ_SASL_PASSWORD="+pw)
	}
	p, err := startProc(c.e.o.Binary, s.name, env, append(c.args, "--checkpoint-dir", s.dir)...)
	if err != nil {
		return err
	}
	s.p = p
	return nil
}

// pauseKills is how long chaos waits for progress before it stops killing.
const pauseKills = 30 * time.Second

// loop kills and restarts until progress reports want, failing when
// progress stops for three minutes.
func (c *chaos) loop(ctx context.Context, rng *rand.Rand, progress func() (int64, error), want int64) error {
	last, lastMove := int64(-1), time.Now()
	next := time.Now().Add(c.interval(rng))
	for {
		n, err := progress()
		if err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		if n != last {
			last, lastMove = n, time.Now()
		}
		if time.Since(lastMove) > 3*time.Minute {
			return fmt.Errorf("bench: chaos: no progress for 3 minutes at %d of %d tasks, with no kills for the last %v: the system is stuck, not just slowed down by the kills. %s",
				n, want, (3*time.Minute - pauseKills).Round(time.Second), c.outputs())
		}
		// A run that stops moving for a while gets no more kills, so that
		// a stall says the system is stuck rather than too busy
		// recovering.
		paused := time.Since(lastMove) > pauseKills
		for _, s := range c.slots {
			if s.p.exited() {
				c.stats.WorkerExits++
				c.e.o.Progress.logf("chaos: %s exited by itself (%v); restarting it. Its last output:\n%s", s.name, s.p.err, strings.TrimSpace(s.p.out.String()))
				if err := c.start(s); err != nil {
					return err
				}
			}
		}
		if paused || time.Now().Before(next) {
			if err := sleep(ctx, 25*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		kills := c.stats.WorkerKills + c.stats.BrokerKills
		if c.e.brk != nil && kills%3 == 1 {
			c.stats.BrokerKills++
			if err := c.e.brk.restart(ctx); err != nil {
				return err
			}
		} else {
			s := c.slots[rng.IntN(len(c.slots))]
			s.p.kill()
			c.stats.WorkerKills++
			if err := c.start(s); err != nil {
				return err
			}
		}
		next = time.Now().Add(c.interval(rng))
	}
}

// interval is the wait before the next kill: uniform from half to one and
// a half KillInterval.
func (c *chaos) interval(rng *rand.Rand) time.Duration {
	k := c.e.o.KillInterval
	return k/2 + time.Duration(rng.Int64N(int64(k)+1))
}

// stopAll stops every worker with SIGTERM and returns their failures.
func (c *chaos) stopAll() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	for _, s := range c.slots {
		if !s.p.exited() {
			_ = s.p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, s := range c.slots {
		if err := s.p.term(60 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// outputs is the last output of every worker, for a failure message.
func (c *chaos) outputs() string {
	var b strings.Builder
	for _, s := range c.slots {
		fmt.Fprintf(&b, "%s's last output:\n%s\n", s.name, strings.TrimSpace(s.p.out.String()))
	}
	return b.String()
}

// laneQueues is the edit of submitAll that moves each task of queue in to
// its lane queue in/q-<index mod n>, or nil for n 0.
func laneQueues(l *load, in string, n int) func(*onceq.Task) {
	if n == 0 {
		return nil
	}
	return func(t *onceq.Task) {
		i, _ := l.index(t.ID)
		t.Queue = in + string(onceq.LaneSep) + "q-" + strconv.Itoa(i%n)
	}
}

// workerArgs are the "onceq worker" arguments of a chaos worker, without
// its checkpoint dir. The session and transaction timeouts are short so
// that a killed worker's partitions move on soon.
func (e *env) workerArgs(group, in, out string) []string {
	queue := in
	if e.o.LaneQueues > 0 {
		queue = in + string(onceq.LaneSep) + `q-[0-9]+`
	}
	args := []string{"worker", "--brokers", strings.Join(e.conn.Brokers, ","), "--group", group, "--queue", queue,
		"--handler", "count:" + out, "--metrics-addr", "", "--session-timeout", "6s", "--transaction-timeout", "5s",
		"--commit-interval", e.o.CommitInterval.String(), "--concurrency", strconv.Itoa(e.o.Concurrency),
		"--log-level", "warn", "--delay-service=false"}
	return append(args, connArgs(e.conn)...)
}

// connArgs are the global flags that carry a connection's TLS and SASL
// settings; the SASL password goes in the environment instead.
func connArgs(c broker.Conn) []string {
	var a []string
	t := c.TLS
	if t.Enabled {
		a = append(a, "--tls")
	}
	for _, f := range []struct{ flag, v string }{
		{"--tls-ca", t.CAFile}, {"--tls-cert", t.CertFile}, {"--tls-key", t.KeyFile}, {"--tls-server-name", t.ServerName},
		{"--sasl-mechanism", c.SASL.Mechanism}, {"--sasl-user", c.SASL.User},
	} {
		if f.v != "" {
			a = append(a, f.flag, f.v)
		}
	}
	if t.InsecureSkipVerify {
		a = append(a, "--tls-insecure-skip-verify")
	}
	return a
}

// diagnose says where a stalled run stands, as an independent reader and
// the group's offsets see it.
func (e *env) diagnose(ctx context.Context, l *load, group, in, out string) string {
	var b strings.Builder
	v, err := e.verify(ctx, out, expectation{l: l, once: true, runs: true})
	if err != nil {
		fmt.Fprintf(&b, "reading %s: %v\n", out, err)
	} else {
		fmt.Fprintf(&b, "a fresh read_committed reader of %s sees %d records, %d unique, %d missing\n", out, v.Records, v.Unique, v.Missing)
	}
	lags, err := e.adm.GroupLag(ctx, group)
	if err != nil {
		fmt.Fprintf(&b, "group %s: %v\n", group, err)
	}
	for _, lg := range lags {
		fmt.Fprintf(&b, "%s/%d committed %d end %d\n", lg.Topic, lg.Partition, lg.Committed, lg.End)
	}
	if info, err := e.adm.DescribeTopic(ctx, in); err == nil {
		for _, p := range info.Partitions {
			fmt.Fprintf(&b, "%s/%d end %d stable %d\n", in, p.Partition, p.End, p.Stable)
		}
	}
	return b.String()
}

// blameInput says, when the output holds duplicates, whether the input
// held them already: a task the producer wrote more often than it was
// submitted, which only an idempotency key would have caught.
func (e *env) blameInput(ctx context.Context, in string, l *load, v *Verification) error {
	if v.Duplicates == 0 {
		return nil
	}
	iv, err := e.verify(ctx, in, expectation{l: l})
	if err != nil {
		return err
	}
	if iv.Duplicates > 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("the input %s holds %d tasks more often than they were submitted", in, iv.Duplicates))
	}
	return nil
}
