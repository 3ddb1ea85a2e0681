// Package sides runs the side services of a long-running onceq process:
// the delay service (package delay), the workflow service (package
// workflow) and the periodic scheduler (package periodic), which onceq
// worker and onceq serve run beside their own work. It is their one
// home: which of them run, where they keep their state, how they are
// named in logs, errors and health probes, and what happens when one of
// them fails.
//
// # The failure policy
//
// A side service that stops while it is meant to run, with an error or
// without one, stops the others, and Run returns an error naming it (for
// example "the delay service stopped: delay: ..."). The commands end on
// that error with exit code 1, after their own orderly stop (a worker
// drains and commits, a server finishes its requests in flight), so that
// the process supervisor (systemd, Kubernetes) restarts the process and
// counts the restart, the way it does for any other crash. Meanwhile
// /healthz and /readyz answer 503 naming the stopped service.
//
// The services are not restarted in the process, for three reasons. A
// service that stopped did so on something a restart in place does not
// mend: a state directory it cannot write, a ladder or a group it is
// refused, a broker that is gone for longer than the session timeout
// (each service already rides out shorter outages by itself). A process
// that goes on without its delay service looks healthy while retries and
// delayed tasks stop moving, and nothing but a log line says so; the
// exit makes it the supervisor's alert and restart, with its backoff.
// And a service runs once: a restart would build a new one, whose
// metrics collide with the old one's in the process's registry.
package sides

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/ops"
	"github.com/onceq/onceq/periodic"
	"github.com/onceq/onceq/workflow"
)

// Config says which side services run and where they keep their state.
type Config struct {
	// Conn reaches the brokers.
	Conn broker.Conn
	// Planner is the delay ladder the services route by. Nil: the
	// cluster's (delay.ClusterPlanner).
	Planner *delay.Planner
	// Registerer registers the services' metrics. Nil: none kept.
	Registerer prometheus.Registerer
	// Logger receives the services' logs, each with the attribute
	// component=<the service's Name>. Nil: discarded.
	Logger *slog.Logger
	// Dir keeps the services' state: the delay service's instance ID in
	// Dir/delay, the workflow service's checkpoint in Dir/workflow.
	// Empty: in memory, so the delay service takes a new instance ID (and
	// transactional ID) on every start, and the workflow service restores
	// its checkpoint from its changelog.
	Dir string
	// Delay runs the delay service, Workflow the workflow service and
	// Scheduler the periodic scheduler.
	Delay, Workflow, Scheduler bool
	// GroupProtocol is the delay service's consumer group protocol
	// (delay.GroupProtocol), the worker's beside it. Empty: the default.
	GroupProtocol string
}

// A Service is one side service, with its names.
type Service struct {
	// Name names it in /healthz and /readyz and in its logs' component
	// attribute: "delay", "workflow" or "scheduler".
	Name string
	// What names it in errors: "the delay service".
	What string
	// Runner is the service itself.
	Runner
}

// A Runner is what a side service is: it runs once, until its context
// ends, and reports its health. *delay.Service, *workflow.Service and
// *periodic.Scheduler are Runners.
type Runner interface {
	Run(context.Context) error
	ops.Checker
}

var (
	_ Runner      = (*delay.Service)(nil)
	_ Runner      = (*workflow.Service)(nil)
	_ Runner      = (*periodic.Scheduler)(nil)
	_ ops.Checker = (*Set)(nil)
)

// Set is the side services of one process. Build it with New, run it
// once with Run.
type Set struct {
	services []Service
	log      *slog.Logger
	health   ops.Health
}

// New builds the services cfg asks for. It does not connect: Run does.
// An error names the service that refused its options.
func New(cfg Config) (*Set, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	dir := func(name string) string {
		if cfg.Dir == "" {
			return ""
		}
		return filepath.Join(cfg.Dir, name)
	}
	s := &Set{log: log}
	for _, b := range []struct {
		on         bool
		name, what string
		build      func(log *slog.Logger) (Runner, error)
	}{
		{cfg.Delay, "delay", "the delay service", func(log *slog.Logger) (Runner, error) {
			opts := []delay.ServiceOpt{delay.Conn(cfg.Conn), delay.WithPlanner(cfg.Planner), delay.Registerer(reg),
				delay.StateDir(dir("delay")), delay.Logger(log)}
			if cfg.GroupProtocol != "" {
				opts = append(opts, delay.GroupProtocol(cfg.GroupProtocol))
			}
			return delay.NewService(opts...)
		}},
		{cfg.Workflow, "workflow", "the workflow service", func(log *slog.Logger) (Runner, error) {
			return workflow.NewService(workflow.Conn(cfg.Conn), workflow.Planner(cfg.Planner), workflow.Registerer(reg),
				workflow.Dir(dir("workflow")), workflow.Logger(log))
		}},
		{cfg.Scheduler, "scheduler", "the periodic scheduler", func(log *slog.Logger) (Runner, error) {
			opts := []periodic.Opt{periodic.Conn(cfg.Conn), periodic.Registerer(reg), periodic.Logger(log)}
			if cfg.Planner != nil {
				opts = append(opts, periodic.Planner(cfg.Planner))
			}
			return periodic.NewScheduler(opts...)
		}},
	} {
		if !b.on {
			continue
		}
		svc, err := b.build(log.With("component", b.name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.what, err)
		}
		s.services = append(s.services, Service{b.name, b.what, svc})
		s.health.Register(b.name, svc)
	}
	return s, nil
}

// Services are the set's services, for a command to report their health
// beside its own components'.
func (s *Set) Services() []Service { return s.services }

// Healthy returns nil while every service is healthy, else their
// problems, each prefixed with the service's Name (ops.Health.Healthy).
func (s *Set) Healthy() error { return s.health.Healthy() }

// Ready returns nil once every service is ready, else why not, each
// prefixed with the service's Name (ops.Health.Ready).
func (s *Set) Ready() error { return s.health.Ready() }

// Run starts the services once after is closed (nil: at once) and runs
// them until ctx ends or one of them stops, whichever comes first; then
// it stops the others and returns once every service returned. Its error
// names the service that stopped while it should have run (the failure
// policy, in the package's doc) and any that returned an error on its
// way out, but for the cancellation it was stopped with; it is nil when
// ctx ended and every service stopped cleanly. A ctx that ends before
// after is closed starts none. With no services Run waits for ctx all
// the same, so that a caller that runs it beside its own work may take
// any return for a stop. Run may be called once.
func (s *Set) Run(ctx context.Context, after <-chan struct{}) error {
	if after != nil {
		select {
		case <-after:
		case <-ctx.Done():
			return nil
		}
	}
	if len(s.services) == 0 {
		<-ctx.Done()
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	type result struct {
		svc Service
		err error
	}
	results := make(chan result, len(s.services))
	for _, svc := range s.services {
		go func() { results <- result{svc, svc.Run(runCtx)} }()
	}
	var errs []error
	for range s.services {
		r := <-results
		asked := runCtx.Err() != nil // ctx ended, or another service stopped first
		cause := r.err
		switch {
		case asked && errors.Is(cause, context.Canceled):
			continue // stopped while starting: the error is the stop itself
		case cause == nil && asked:
			continue
		case cause == nil:
			cause = errors.New("it returned without an error")
		}
		errs = append(errs, fmt.Errorf("%s stopped: %w", r.svc.What, cause))
		if !asked {
			s.log.Error(r.svc.What+" stopped: stopping the other services", "component", r.svc.Name, "err", cause)
			stop()
		}
	}
	return errors.Join(errs...)
}
