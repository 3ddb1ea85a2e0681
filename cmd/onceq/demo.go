package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/producer"
)

// The demo's mix of tasks.
type demoMix struct {
	immediate, delayed, duplicates, flaky, doomed int
	maxDelay                                      time.Duration
}

const (
	demoQueue  = "demo-orders"
	demoOut    = "demo-done"
	demoGroup  = "demo"
	demoDueHdr = "demo-due" // the due time, kept in the output to check "never early"
)

func newDemoCmd(g *globals) *cobra.Command {
	var (
		mix     demoMix
		workers int
		dir     string
		keep    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show the guarantees on the embedded broker: exactly once, never early, dead letters",
		Long: `Start an embedded broker and worker processes, submit a mix of tasks (immediate,
delayed, duplicate IDs, failing then succeeding, always failing), SIGKILL one
worker in the middle, and check each guarantee with an independent
read_committed reader. Exit 0 when every check holds, 1 otherwise.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case workers < 2 || workers > 8:
				return usagef("--workers %d: want 2 to 8", workers)
			case mix.immediate < 1 || mix.delayed < 0 || mix.duplicates < 0 || mix.flaky < 0 || mix.doomed < 0:
				return usagef("--immediate must be 1 or more and the other counts 0 or more")
			case mix.duplicates > mix.immediate:
				return usagef("--duplicates %d: at most --immediate (%d)", mix.duplicates, mix.immediate)
			case mix.maxDelay < time.Second || mix.maxDelay > 5*time.Minute:
				return usagef("--max-delay %v: want 1s to 5m", mix.maxDelay)
			case timeout < 10*time.Second:
				return usagef("--timeout %v: want 10s or more", timeout)
			}
			return runDemo(cmd.Context(), g, mix, workers, dir, keep, timeout)
		},
	}
	f := cmd.Flags()
	f.IntVar(&mix.immediate, "immediate", 2000, "tasks due at once")
	f.IntVar(&mix.delayed, "delayed", 500, "tasks delayed between 1s and --max-delay")
	f.IntVar(&mix.duplicates, "duplicates", 200, "immediate tasks submitted a second time with the same ID")
	f.IntVar(&mix.flaky, "flaky", 100, "tasks that fail twice, then succeed")
	f.IntVar(&mix.doomed, "doomed", 50, "tasks that always fail and end in the dead letters")
	f.DurationVar(&mix.maxDelay, "max-delay", 8*time.Second, "longest delay of the delayed tasks")
	f.IntVar(&workers, "workers", 3, "worker processes")
	f.StringVar(&dir, "dir", "", "directory for the broker's data, checkpoints and worker logs (default: a new temporary one)")
	f.BoolVar(&keep, "keep", false, "keep the broker and workers running after the report, until Ctrl-C, to explore")
	f.DurationVar(&timeout, "timeout", 80*time.Second, "give up if the tasks have not all ended by then")
	return cmd
}

// demoRun is one run of the demo: where things are and what was submitted.
type demoRun struct {
	g       *globals
	dir     string
	addr    string
	conn    broker.Conn
	workers []*demoWorker
	started time.Time
	due     map[string]time.Time // delayed IDs
	ok      []string             // IDs that must end in the output
	dead    []string             // IDs that must end in the dead letters
}

type demoWorker struct {
	n       int
	proc    *os.Process
	done    chan error
	logPath string
}

func runDemo(ctx context.Context, g *globals, mix demoMix, workers int, dir string, keep bool, timeout time.Duration) error {
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "onceq-demo-"); err != nil {
			return err
		}
	}
	d := &demoRun{g: g, dir: dir, started: time.Now(), due: map[string]time.Time{}}
	out := g.stdout
	emb, err := broker.StartEmbedded(broker.EmbeddedConfig{DataDir: filepath.Join(dir, "broker"), Partitions: 4})
	if err != nil {
		return err
	}
	defer emb.Close()
	d.addr = emb.Addr()
	d.conn = broker.Conn{Brokers: []string{d.addr}}
	fmt.Fprintf(out, "onceq demo: embedded broker at %s, data and logs in %s\n", d.addr, dir)
	if err := d.createTopics(ctx); err != nil {
		return err
	}
	for i := 1; i <= workers; i++ {
		w, err := d.startWorker(i)
		if err != nil {
			return err
		}
		d.workers = append(d.workers, w)
	}
	defer d.stopWorkers()

	if err := d.submit(ctx, mix); err != nil {
		return err
	}
	fmt.Fprintf(out, "submitted %d immediate, %d delayed (1s to %v), %d duplicate IDs, %d failing twice, %d always failing\n",
		mix.immediate, mix.delayed, mix.maxDelay, mix.duplicates, mix.flaky, mix.doomed)

	// Kill a worker in the middle: once a third of the tasks are done and
	// delayed ones are still waiting; then restart it.
	victim := d.workers[1]
	if err := d.waitFor(ctx, len(d.ok)/3, 0, timeout); err != nil {
		return err
	}
	select {
	case <-time.After(time.Until(d.started.Add(mix.maxDelay / 2))):
	case <-ctx.Done():
		return ctx.Err()
	}
	_ = victim.proc.Signal(syscall.SIGKILL)
	<-victim.done
	killedAt := time.Since(d.started)
	fmt.Fprintf(out, "killed worker %d with SIGKILL at %.1fs; restarting it\n", victim.n, killedAt.Seconds())
	restarted, err := d.startWorker(victim.n)
	if err != nil {
		return err
	}
	d.workers[1] = restarted

	if err := d.waitFor(ctx, len(d.ok), len(d.dead), timeout); err != nil {
		fmt.Fprintf(out, "%v\n", err)
	}
	time.Sleep(time.Second) // anything duplicated would be visible by now
	failed := d.report(mix)
	if keep {
		d.explore(ctx)
	}
	if failed > 0 {
		return fmt.Errorf("demo: %d check(s) failed; worker logs are in %s", failed, dir)
	}
	return nil
}

func (d *demoRun) createTopics(ctx context.Context) error {
	adm, err := broker.NewAdmin(d.conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	for _, q := range []string{demoQueue, demoOut} {
		if err := adm.EnsureTopic(ctx, q, 4, nil); err != nil {
			return err
		}
	}
	return nil
}

func (d *demoRun) startWorker(n int) (*demoWorker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	w := &demoWorker{n: n, done: make(chan error, 1), logPath: filepath.Join(d.dir, fmt.Sprintf("worker-%d.log", n))}
	logf, err := os.OpenFile(w.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{self, "worker", "--brokers", d.addr, "--queue", demoQueue, "--handler", "flaky:" + demoOut,
		"--group", demoGroup, "--checkpoint-dir", filepath.Join(d.dir, fmt.Sprintf("worker-%d", n)),
		"--max-attempts", "3", "--backoff-base", "500ms", "--backoff-factor", "2", "--session-timeout", "6s",
		"--transaction-timeout", "5s", "--metrics-addr", "127.0.0.1:0"}
	w.proc, err = os.StartProcess(self, args, &os.ProcAttr{Files: []*os.File{nil, logf, logf}})
	if err != nil {
		return nil, fmt.Errorf("demo: starting worker %d: %w", n, err)
	}
	go func() {
		_, err := w.proc.Wait()
		w.done <- err
	}()
	return w, nil
}

func (d *demoRun) stopWorkers() {
	for _, w := range d.workers {
		_ = w.proc.Signal(syscall.SIGTERM)
	}
	for _, w := range d.workers {
		select {
		case <-w.done:
		case <-time.After(20 * time.Second):
			_ = w.proc.Kill()
		}
	}
}

// submit writes the mix through the producer library.
func (d *demoRun) submit(ctx context.Context, mix demoMix) error {
	p, err := producer.New(producer.Conn(d.conn))
	if err != nil {
		return err
	}
	defer p.Close()
	var failed atomic.Value
	onDone := func(_ producer.Receipt, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, err)
		}
	}
	add := func(t onceq.Task) { p.SubmitAsync(ctx, t, onDone) }
	now := time.Now()
	for i := 0; i < mix.immediate; i++ {
		id := fmt.Sprintf("order-%d", i)
		d.ok = append(d.ok, id)
		add(onceq.Task{ID: id, Queue: demoQueue, Payload: []byte(`{"order":` + strconv.Itoa(i) + `}`)})
	}
	for i := 0; i < mix.delayed; i++ {
		id := fmt.Sprintf("reminder-%d", i)
		due := now.Add(time.Second + time.Duration(i)*(mix.maxDelay-time.Second)/time.Duration(max(mix.delayed, 1)))
		d.ok, d.due[id] = append(d.ok, id), due
		add(onceq.Task{ID: id, Queue: demoQueue, Due: due, Headers: []onceq.Header{{Key: demoDueHdr, Value: []byte(strconv.FormatInt(due.UnixMilli(), 10))}}})
	}
	for i := 0; i < mix.duplicates; i++ {
		add(onceq.Task{ID: fmt.Sprintf("order-%d", i*max(mix.immediate/max(mix.duplicates, 1), 1)), Queue: demoQueue, Payload: []byte("again")})
	}
	for i := 0; i < mix.flaky; i++ {
		id := fmt.Sprintf("flaky-%d", i)
		d.ok = append(d.ok, id)
		add(onceq.Task{ID: id, Queue: demoQueue, Headers: []onceq.Header{{Key: handlers.FailHeader, Value: []byte("2")}}})
	}
	for i := 0; i < mix.doomed; i++ {
		id := fmt.Sprintf("doomed-%d", i)
		d.dead = append(d.dead, id)
		add(onceq.Task{ID: id, Queue: demoQueue, Headers: []onceq.Header{{Key: handlers.FailHeader, Value: []byte("always")}}})
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	if err, _ := failed.Load().(error); err != nil {
		return fmt.Errorf("demo: submitting: %w", err)
	}
	return nil
}

// waitFor waits until the output and the dead letters hold at least the
// given counts, showing progress.
func (d *demoRun) waitFor(ctx context.Context, outputs, dead int, timeout time.Duration) error {
	deadline := d.started.Add(timeout)
	var lastLine time.Time
	for {
		o := d.count(demoOut)
		dl := d.count(broker.DLQTopic(demoQueue))
		line := fmt.Sprintf("  %5.1fs  done %d/%d  dead letters %d/%d", time.Since(d.started).Seconds(), min(o, len(d.ok)), len(d.ok), dl, len(d.dead))
		finished := o >= outputs && dl >= dead
		switch {
		case isTerminal(d.g.stderr):
			fmt.Fprintf(d.g.stderr, "\r%s ", line)
			if finished || time.Now().After(deadline) {
				fmt.Fprintln(d.g.stderr)
			}
		case finished || time.Since(lastLine) > 2*time.Second:
			fmt.Fprintln(d.g.stderr, line)
			lastLine = time.Now()
		}
		if finished {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: not all tasks ended within %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// count is how many records a topic holds for read_committed readers,
// less transaction markers (an estimate: exact counts come from report).
func (d *demoRun) count(topic string) int {
	recs, err := readAll(d.conn, topic, 10*time.Second)
	if err != nil {
		return 0
	}
	return len(recs)
}

// readAll reads every record of topic visible to a fresh read_committed
// reader.
func readAll(conn broker.Conn, topic string, timeout time.Duration) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	err := broker.ReadCommitted(ctx, conn, topic, func(r *kgo.Record) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// report checks each guarantee with a fresh read_committed reader and
// prints it; it returns how many checks failed.
func (d *demoRun) report(mix demoMix) int {
	out := d.g.stdout
	failed := 0
	check := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark, failed = "FAIL", failed+1
		}
		fmt.Fprintf(out, "  %s %s\n", mark, fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(out, "\nchecks (a fresh read_committed reader of every topic):")
	outs, err := readAll(d.conn, demoOut, time.Minute)
	if err != nil {
		check(false, "reading %s: %v", demoOut, err)
		return failed
	}
	seen := map[string]int{}
	var early int
	var late []time.Duration
	runsAbove1 := 0
	for _, r := range outs {
		t, err := onceq.FromRecord(r)
		if err != nil {
			check(false, "decoding an output: %v", err)
			continue
		}
		seen[t.ID]++
		var due, started int64
		for _, h := range t.Headers {
			switch h.Key {
			case demoDueHdr:
				due, _ = strconv.ParseInt(string(h.Value), 10, 64)
			case handlers.StartedHeader:
				started, _ = strconv.ParseInt(string(h.Value), 10, 64)
			case handlers.RunsHeader:
				if string(h.Value) != "1" {
					runsAbove1++
				}
			}
		}
		if due > 0 {
			if lag := time.Duration(started-due) * time.Millisecond; started < due {
				early++
			} else {
				late = append(late, lag)
			}
		}
	}
	missing, dups := 0, 0
	for _, id := range d.ok {
		switch seen[id] {
		case 0:
			missing++
		case 1:
		default:
			dups++
		}
	}
	check(missing == 0 && dups == 0 && len(seen) == len(d.ok) && runsAbove1 == 0,
		"executed once: %d distinct task IDs in %s, %d duplicated, %d missing, %d per-ID run counters above 1 (%d resubmitted duplicates skipped)",
		len(seen), demoOut, dups, missing, runsAbove1, mix.duplicates)
	if mix.delayed > 0 {
		slices.Sort(late)
		check(early == 0 && len(late) == mix.delayed, "never early: %d delayed tasks, %d started before their due time; lateness (start - due) %s", len(late)+early, early, latenessSummary(late))
	}
	if mix.flaky > 0 {
		n := 0
		for id := range seen {
			if strings.HasPrefix(id, "flaky-") {
				n++
			}
		}
		check(n == mix.flaky, "retried: %d of %d tasks failed twice, then succeeded on their third attempt", n, mix.flaky)
	}
	dls, err := readAll(d.conn, broker.DLQTopic(demoQueue), time.Minute)
	if err != nil && mix.doomed > 0 {
		check(false, "reading the dead letters: %v", err)
		return failed
	}
	reasons := map[string]int{}
	deadSeen := map[string]int{}
	var sample string
	for _, r := range dls {
		t, err := onceq.FromRecord(r)
		if err != nil {
			continue
		}
		deadSeen[t.ID]++
		reason, _, _ := strings.Cut(t.LastError, ":")
		reasons[reason]++
		sample = t.LastError
	}
	okDead := len(dls) == len(d.dead)
	for _, id := range d.dead {
		okDead = okDead && deadSeen[id] == 1
	}
	check(okDead, "dead letters: %d in %s (want %d), by reason %v; e.g. %q", len(dls), broker.DLQTopic(demoQueue), len(d.dead), reasons, sample)
	fmt.Fprintf(out, `
try next:
  onceq broker                                      # a broker of your own on 127.0.0.1:9092
  onceq topics create emails --partitions 8
  onceq produce --queue emails --id hello-1 '{"to":"you@example.com"}'
  onceq produce --queue emails --delay 30s 'later'
  onceq worker --queue emails --handler exec:'cat' --metrics-addr 127.0.0.1:9464
  curl -s 127.0.0.1:9464/metrics | grep onceq_
  onceq delay stats; onceq dlq list emails
  onceq demo --keep                                 # keep this demo's broker and workers running
`)
	return failed
}

func latenessSummary(late []time.Duration) string {
	if len(late) == 0 {
		return "n/a"
	}
	q := func(f float64) time.Duration { return late[int(f*float64(len(late)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v, p99 %v, max %v", q(0.5), q(0.99), late[len(late)-1].Round(time.Millisecond))
}

// explore keeps everything running until ctx is done.
func (d *demoRun) explore(ctx context.Context) {
	out := d.g.stdout
	fmt.Fprintf(out, "\nkept running (Ctrl-C to stop): --brokers %s\n", d.addr)
	for _, w := range d.workers {
		if url := metricsURL(w.logPath); url != "" {
			fmt.Fprintf(out, "  worker %d metrics: %s\n", w.n, url)
		}
	}
	<-ctx.Done()
}

// metricsURL finds the metrics URL a worker logged.
func metricsURL(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	var url string
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, "url=http://"); i >= 0 {
			url = strings.Fields(line[i+4:])[0]
		}
	}
	return url
}
