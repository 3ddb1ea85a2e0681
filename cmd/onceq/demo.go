package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
		Short: "Show the guarantees on the embedded broker or a cluster: exactly once, never early, dead letters",
		Long: `Start an embedded broker and worker processes, submit a mix of tasks (immediate,
delayed, duplicate IDs, failing then succeeding, always failing) and workflows
(chords and chains, a tenth of their tasks failing once first), SIGKILL one
worker in the middle, and check each guarantee with an independent
read_committed reader. Exit 0 when every check holds, 1 otherwise.

With --brokers (flag, ONCEQ_BROKERS or the config file) the demo starts no
broker: it runs on that cluster, its workers inheriting the connection flags
(TLS, SASL, replication) through their environment, and names its queues,
group and workflows after the run (demo-<run>-orders, demo-<run>-done, group
demo-<run>, workflows <run>-chord-N), so that runs on one cluster never meet.
It leaves its topics behind: delete them with "onceq topics delete" when done.`,
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
			d := &demoRun{g: g, dir: dir, workers: make([]*demoWorker, 0, workers), names: demo.NamesFor("")}
			if cmd.Flags().Changed("brokers") { // from the flag, ONCEQ_BROKERS or the config file
				conn, err := g.conn()
				if err != nil {
					return err
				}
				d.conn, d.names = conn, demo.NamesFor(runName(time.Now()))
				d.env = append(os.Environ(), inheritedEnv(cmd)...)
			}
			return d.run(cmd.Context(), mix, workers, keep, timeout)
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
	g   *globals
	dir string
	// conn is the cluster the run was given (none: the run starts its
	// own embedded broker, and conn is that); env, for a given cluster,
	// is the workers' environment, which carries the connection flags
	// (nil: they inherit the demo's).
	conn    broker.Conn
	env     []string
	names   demo.Names
	workers []*demoWorker
	started time.Time
	plan    *demo.Plan
}

// runName names a run on a cluster of the user's: its start time to the
// second and four random hex digits, which keep two runs started in the
// same second apart.
func runName(now time.Time) string {
	return fmt.Sprintf("%s-%04x", now.UTC().Format("20060102t150405"), rand.N(1<<16))
}

// inheritedEnv returns the global flags cmd was given (on the command
// line, in the environment or in the config file) as the ONCEQ_<FLAG>
// variables of a child process, so that the demo's workers reach the
// cluster as the demo does, without secrets on their command lines.
func inheritedEnv(cmd *cobra.Command) []string {
	var env []string
	cmd.InheritedFlags().Visit(func(f *pflag.Flag) {
		if f.Name != configFlag {
			env = append(env, envName(f.Name)+"="+f.Value.String())
		}
	})
	return env
}

func (d *demoRun) run(ctx context.Context, mix demo.Mix, workers int, keep bool, timeout time.Duration) (err error) {
	g := d.g
	if d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "onceq-demo-"); err != nil {
			return err
		}
		// Its own temporary dir goes once everything stopped (deferred
		// first, it runs last), unless asked to keep it or a check
		// failed: the worker logs then say why.
		defer func() {
			if keep || err != nil {
				fmt.Fprintf(g.stdout, "data and logs kept in %s\n", d.dir)
				return
			}
			if rerr := os.RemoveAll(d.dir); rerr != nil {
				fmt.Fprintf(g.stderr, "onceq demo: removing %s: %v\n", d.dir, rerr)
			}
		}()
	}
	d.started = time.Now()
	out := g.stdout
	if len(d.conn.Brokers) == 0 { // no cluster given: the demo's own broker
		emb, err := embedded.Start(embedded.Config{DataDir: filepath.Join(d.dir, "broker"), Partitions: 4})
		if err != nil {
			return err
		}
		defer emb.Close()
		d.conn = broker.Conn{Brokers: []string{emb.Addr()}}
		fmt.Fprintf(out, "onceq demo: embedded broker at %s, data and logs in %s\n", emb.Addr(), d.dir)
	} else {
		fmt.Fprintf(out, "onceq demo: brokers %s, queue %s, group %s, data and logs in %s\n",
			strings.Join(d.conn.Brokers, ","), d.names.Queue, d.names.Group, d.dir)
	}
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
		return fmt.Errorf("demo: %d check(s) failed; worker logs are in %s", failed, d.dir)
	}
	return nil
}

func (d *demoRun) createTopics(ctx context.Context) error {
	adm, err := broker.NewAdmin(d.conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	for _, q := range []string{d.names.Queue, d.names.Out} {
		if err := adm.EnsureTopic(ctx, q, 4, nil); err != nil {
			return err
		}
	}
	return nil
}

// submit writes the mix's plan through the producer library.
func (d *demoRun) submit(ctx context.Context, mix demo.Mix) error {
	d.plan = demo.NewPlan(mix, d.names, time.Now())
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
