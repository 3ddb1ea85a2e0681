package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/demo"
	"github.com/onceq/onceq/producer"
)

func newDemoCmd(g *globals) *cobra.Command {
	var (
		mix     demo.Mix
		workers int
		dir     string
		keep    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show the guarantees on the embedded broker: exactly once, never early, dead letters",
		Long: `Start an embedded broker and worker processes, submit a mix of tasks (immediate,
delayed, duplicate IDs, failing then succeeding, always failing) and workflows
(chords and chains, a tenth of their tasks failing once first), SIGKILL one
worker in the middle, and check each guarantee with an independent
read_committed reader. Exit 0 when every check holds, 1 otherwise.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case workers < 2 || workers > 8:
				return usagef("--workers %d: want 2 to 8", workers)
			case mix.Immediate < 1 || mix.Delayed < 0 || mix.Duplicates < 0 || mix.Flaky < 0 || mix.Doomed < 0 || mix.Chords < 0 || mix.Chains < 0:
				return usagef("--immediate must be 1 or more and the other counts 0 or more")
			case mix.ChordMembers < 1 || mix.ChordMembers > 1000 || mix.ChainSteps < 2 || mix.ChainSteps > 100:
				return usagef("--chord-members %d, --chain-steps %d: want 1 to 1000 members and 2 to 100 steps", mix.ChordMembers, mix.ChainSteps)
			case mix.Duplicates > mix.Immediate:
				return usagef("--duplicates %d: at most --immediate (%d)", mix.Duplicates, mix.Immediate)
			case mix.MaxDelay < time.Second || mix.MaxDelay > 5*time.Minute:
				return usagef("--max-delay %v: want 1s to 5m", mix.MaxDelay)
			case timeout < 10*time.Second:
				return usagef("--timeout %v: want 10s or more", timeout)
			}
			return runDemo(cmd.Context(), g, mix, workers, dir, keep, timeout)
		},
	}
	f := cmd.Flags()
	f.IntVar(&mix.Immediate, "immediate", 2000, "tasks due at once")
	f.IntVar(&mix.Delayed, "delayed", 500, "tasks delayed between 1s and --max-delay")
	f.IntVar(&mix.Duplicates, "duplicates", 200, "immediate tasks submitted a second time with the same ID")
	f.IntVar(&mix.Flaky, "flaky", 100, "tasks that fail twice, then succeed")
	f.IntVar(&mix.Doomed, "doomed", 50, "tasks that always fail and end in the dead letters")
	f.DurationVar(&mix.MaxDelay, "max-delay", 8*time.Second, "longest delay of the delayed tasks")
	f.IntVar(&mix.Chords, "chords", 20, "chords (workflows: a group of --chord-members tasks, then a callback with all their results)")
	f.IntVar(&mix.ChordMembers, "chord-members", 10, "members of each chord")
	f.IntVar(&mix.Chains, "chains", 20, "chains (workflows of --chain-steps tasks, each with the result of the one before)")
	f.IntVar(&mix.ChainSteps, "chain-steps", 5, "steps of each chain")
	f.IntVar(&workers, "workers", 3, "worker processes")
	f.StringVar(&dir, "dir", "", "directory for the broker's data, checkpoints and worker logs (default: a new temporary one, removed at the end unless --keep or a check failed)")
	f.BoolVar(&keep, "keep", false, "keep the broker and workers running after the report, until Ctrl-C, to explore, and keep the temporary dir")
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
	plan    *demo.Plan
}

func runDemo(ctx context.Context, g *globals, mix demo.Mix, workers int, dir string, keep bool, timeout time.Duration) (err error) {
	if dir == "" {
		if dir, err = os.MkdirTemp("", "onceq-demo-"); err != nil {
			return err
		}
		// Its own temporary dir goes once everything stopped (deferred
		// first, it runs last), unless asked to keep it or a check
		// failed: the worker logs then say why.
		defer func() {
			if keep || err != nil {
				fmt.Fprintf(g.stdout, "data and logs kept in %s\n", dir)
				return
			}
			if rerr := os.RemoveAll(dir); rerr != nil {
				fmt.Fprintf(g.stderr, "onceq demo: removing %s: %v\n", dir, rerr)
			}
		}()
	}
	d := &demoRun{g: g, dir: dir, started: time.Now()}
	out := g.stdout
	emb, err := embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "broker"), Partitions: 4})
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
	fmt.Fprintf(out, "submitted %d immediate, %d delayed (1s to %v), %d duplicate IDs, %d failing twice, %d always failing; %d chords of %d, %d chains of %d\n",
		mix.Immediate, mix.Delayed, mix.MaxDelay, mix.Duplicates, mix.Flaky, mix.Doomed, mix.Chords, mix.ChordMembers, mix.Chains, mix.ChainSteps)

	// Kill a worker in the middle: once a third of the tasks are done and
	// delayed ones are still waiting; then restart it.
	victim := d.workers[1]
	if err := d.waitFor(ctx, len(d.plan.OK)/3, 0, timeout); err != nil {
		return err
	}
	select {
	case <-time.After(time.Until(d.started.Add(mix.MaxDelay / 2))):
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

	if err := d.waitFor(ctx, len(d.plan.OK), len(d.plan.Dead), timeout); err != nil {
		fmt.Fprintf(out, "%v\n", err)
	}
	time.Sleep(time.Second) // anything duplicated would be visible by now
	failed := d.report()
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
	for _, q := range []string{demo.Queue, demo.Out} {
		if err := adm.EnsureTopic(ctx, q, 4, nil); err != nil {
			return err
		}
	}
	return nil
}

// submit writes the mix's plan through the producer library.
func (d *demoRun) submit(ctx context.Context, mix demo.Mix) error {
	d.plan = demo.NewPlan(mix, time.Now())
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
	for _, t := range d.plan.Tasks {
		p.SubmitAsync(ctx, t, onDone)
	}
	if err := p.Flush(ctx); err != nil {
		return err
	}
	if err, _ := failed.Load().(error); err != nil {
		return fmt.Errorf("demo: submitting: %w", err)
	}
	return nil
}
