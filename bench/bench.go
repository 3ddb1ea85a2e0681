package bench

import (
	"context"
	"math/rand/v2"
	"time"
)

// Run runs one scenario with its baselines and returns the report. An
// error means the bench could not run (bad options, the brokers
// unreachable, a component failed); a run whose verification failed
// returns a report with OK false and no error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	rep := newReport(&o, started)
	e, err := setup(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer e.close()
	rep.Broker = e.kind
	l := newLoad(&o, e.prefix, rand.New(rand.NewPCG(o.Seed, 1)))
	rep.Config.Submissions = len(l.order)
	o.Progress.logf("onceq bench: scenario %s, %d tasks (%d submissions), broker %s %s, seed %d",
		o.Scenario, o.Tasks, len(l.order), e.kind, e.conn.Brokers[0], o.Seed)
	switch o.Scenario {
	case Produce:
		rep.Runs, err = runProduce(ctx, e, l)
	case Process:
		rep.Runs, err = runProcess(ctx, e, l)
	case E2E:
		rep.Runs, err = runE2E(ctx, e, l)
	case Delay:
		rep.Runs, err = runDelay(ctx, e, l, o.Seed)
	case Chaos:
		rep.Runs, rep.Chaos, err = runChaos(ctx, e, l, o.Seed)
	}
	if err != nil {
		return nil, err
	}
	rep.finish(started)
	return rep, nil
}
