package periodic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/producer"
)

// retryPause is how long a schedule whose submission failed waits before
// it is tried again.
const retryPause = time.Second

// maxSleep bounds the scheduler's sleep between two looks at its
// schedules, so a clock that jumps is noticed.
const maxSleep = time.Minute

// Scheduler submits the ticks of the schedules in the store. Create it
// with NewScheduler and run it with Run. Any number of schedulers may run
// on the same store with no leader and no lock: each submits every tick,
// as a task whose ID is TaskID(name, tick) and whose due time is the
// tick, and workers run each ID once (their dedup window; a tick's
// submissions meet in one partition, since the ID is the key).
//
// A scheduler submits each tick Lead before it. After the submissions are
// acknowledged it records the latest tick as the schedule's cursor in the
// store, so that a scheduler starting after every scheduler was down knows
// which ticks were missed, and applies the schedule's Missed policy to
// them. A cursor is written only after its tick's submission, so it never
// claims a tick that was not submitted; one that is lost or overtaken
// makes a scheduler submit some ticks again, which run once.
type Scheduler struct {
	cfg config
	m   *metrics

	started atomic.Bool
	phase   atomic.Int32
	runErr  atomic.Pointer[error]
	ready   atomic.Bool
}

// Phases of Run.
const (
	notStarted int32 = iota
	running
	stopped
)

// NewScheduler checks the options and returns a scheduler. It does not
// connect: Run does.
func NewScheduler(opts ...Opt) (*Scheduler, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.registerer)
	if err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg, m: m}, nil
}

// Healthy returns nil while the scheduler works: before Run and while Run
// runs. It implements the health check of the command's /healthz.
func (s *Scheduler) Healthy() error {
	if s.phase.Load() != stopped {
		return nil
	}
	if err := s.runErr.Load(); err != nil && *err != nil {
		return fmt.Errorf("periodic: stopped: %w", *err)
	}
	return errors.New("periodic: stopped")
}

// Ready returns nil once Run has read the store and schedules.
func (s *Scheduler) Ready() error {
	switch {
	case s.phase.Load() == stopped:
		return errors.New("periodic: stopped")
	case !s.ready.Load():
		return errors.New("periodic: reading the schedules")
	}
	return nil
}

// Run reads the store and submits the schedules' ticks until ctx ends,
// following the store as schedules are added, changed and removed. A
// failed submission is logged and tried again; Run returns an error only
// when it cannot start (the store's topic cannot be read), and nil when
// ctx ends.
func (s *Scheduler) Run(ctx context.Context) (err error) {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("periodic: Run called twice: create another Scheduler")
	}
	s.phase.Store(running)
	defer func() {
		s.runErr.Store(&err)
		s.phase.Store(stopped)
	}()
	store, err := Open(ctx, s.cfg.conn, s.cfg.log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}
	defer store.Close()
	popts := []producer.Opt{producer.Conn(s.cfg.conn), producer.Logger(s.cfg.log)}
	if s.cfg.planner != nil {
		popts = append(popts, producer.Planner(s.cfg.planner))
	}
	prod, err := producer.New(append(popts, producer.Registerer(s.cfg.registerer))...)
	if err != nil {
		return fmt.Errorf("periodic: %w", err)
	}
	defer prod.Close()
	s.ready.Store(true)
	r := &run{cfg: &s.cfg, m: s.m, store: store, prod: prod, tracks: map[string]*track{}}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wake := r.step(ctx, time.Now())
		if ctx.Err() != nil {
			return nil
		}
		timer.Reset(time.Until(wake))
		select {
		case <-ctx.Done():
			return nil
		case <-store.changed:
		case <-timer.C:
		}
	}
}

// run is the state of one Run.
type run struct {
	cfg    *config
	m      *metrics
	store  *Store
	prod   *producer.Producer
	tracks map[string]*track
}

// track is a schedule as a scheduler follows it.
type track struct {
	c       *compiled
	after   time.Time // every tick up to it is submitted or skipped
	retryAt time.Time // after a failed submission
	failing bool      // since the last failure was logged
}

// step submits what is due at now and returns when to look again.
func (r *run) step(ctx context.Context, now time.Time) time.Time {
	r.sync(now)
	names := make([]string, 0, len(r.tracks))
	for name := range r.tracks {
		names = append(names, name)
	}
	slices.Sort(names)

	type pending struct {
		tr   *track
		base time.Time // after, with the ticks the plan skips
		p    plan
		errs []error // one per tick of p.submit
	}
	var todo []*pending
	n := 0
	for _, name := range names {
		tr := r.tracks[name]
		if now.Before(tr.retryAt) {
			continue
		}
		p := planTicks(tr.c, tr.after, now, r.cfg.lead, r.cfg.maxCatchUp)
		base := tr.after
		if p.skipped > 0 {
			r.cfg.log.Warn("missed ticks skipped: no scheduler submitted them in time", "schedule", name, "count", p.skipped,
				"first", p.skippedFirst, "last", p.skippedLast, "policy", tr.c.Missed, "max_catch_up", r.cfg.maxCatchUp)
			r.m.skipped.WithLabelValues(name).Add(float64(p.skipped))
			base = p.skippedLast
		}
		if p.late > 0 {
			r.cfg.log.Info("catching up on missed ticks", "schedule", name, "count", p.late, "first", p.submit[0], "last", p.submit[p.late-1])
		}
		if len(p.submit) == 0 {
			tr.after = p.done
			continue
		}
		todo = append(todo, &pending{tr: tr, base: base, p: p, errs: make([]error, len(p.submit))})
		n += len(p.submit)
	}

	// Submit every tick at once, and wait for the answers.
	type answer struct {
		pd  *pending
		i   int
		err error
	}
	answers := make(chan answer, n)
	for _, pd := range todo {
		c := pd.tr.c
		for i, tick := range pd.p.submit {
			task := onceq.Task{ID: TaskID(c.Name, tick), Queue: c.Queue, Payload: c.Payload, Due: tick,
				MaxAttempts: c.MaxAttempts, Timeout: c.Timeout}
			r.prod.SubmitAsync(ctx, task, func(_ producer.Receipt, err error) { answers <- answer{pd, i, err} })
		}
	}
	for range n {
		select {
		case a := <-answers:
			a.pd.errs[a.i] = a.err
		case <-ctx.Done():
			return now
		}
	}

	for _, pd := range todo {
		r.settle(pd.tr, pd.base, pd.p, pd.errs, now)
	}
	return r.wake(now)
}

// settle moves a schedule on over the ticks of p whose submission was
// acknowledged, up to the first that failed, and records the cursor.
func (r *run) settle(tr *track, base time.Time, p plan, errs []error, now time.Time) {
	name := tr.c.Name
	ok := 0
	for ok < len(errs) && errs[ok] == nil {
		ok++
	}
	if ok > 0 {
		last := p.submit[ok-1]
		tr.after = last
		r.m.submitted.WithLabelValues(name).Add(float64(ok))
		r.m.late.WithLabelValues(name).Add(float64(min(ok, p.late)))
		r.m.lastTick.WithLabelValues(name).Set(float64(last.Unix()))
		if r.store.cursorBefore(tr.c, last) {
			r.store.writeCursor(tr.c, last)
		}
		r.cfg.log.Debug("ticks submitted", "schedule", name, "count", ok, "last", last)
	} else {
		tr.after = base
	}
	if ok == len(errs) {
		if tr.failing {
			r.cfg.log.Info("submitting ticks again", "schedule", name)
		}
		tr.failing = false
		return
	}
	err := errs[ok]
	r.m.errors.WithLabelValues(name).Inc()
	tr.retryAt = now.Add(retryPause)
	if !tr.failing {
		level := slog.LevelWarn
		if errors.Is(err, producer.ErrClosed) || errors.Is(err, context.Canceled) {
			level = slog.LevelDebug // stopping
		}
		r.cfg.log.Log(context.Background(), level, "cannot submit a tick; trying again every second", "schedule", name,
			"tick", p.submit[ok], "queue", tr.c.Queue, "err", err)
	}
	tr.failing = true
}

// wake returns when the next tick of a schedule is due to be submitted.
func (r *run) wake(now time.Time) time.Time {
	wake := now.Add(maxSleep)
	for _, tr := range r.tracks {
		at := tr.retryAt
		if !now.Before(at) {
			next := tr.c.next(tr.after)
			if next.IsZero() {
				continue
			}
			at = next.Add(-r.cfg.lead)
		}
		if at.Before(wake) {
			wake = at
		}
	}
	return wake
}

// sync follows the store: schedules found, replaced and removed, and the
// progress other schedulers recorded.
func (r *run) sync(now time.Time) {
	snap := r.store.snapshot()
	for name, rs := range snap {
		tr, ok := r.tracks[name]
		switch {
		case !ok:
			tr = &track{c: rs.c, after: rs.after}
			r.tracks[name] = tr
			r.cfg.log.Info("following a schedule", "schedule", name, "queue", rs.c.Queue, "timing", rs.c.Timing(),
				"missed", rs.c.Missed, "next", rs.c.next(later(now, rs.after)))
		case tr.c != rs.c:
			if !sameTiming(tr.c.Schedule, rs.c.Schedule) || !tr.c.Since.Equal(rs.c.Since) {
				tr.after = rs.after // a new schedule under the same name
			}
			tr.c, tr.retryAt, tr.failing = rs.c, time.Time{}, false
			r.cfg.log.Info("schedule changed", "schedule", name, "queue", rs.c.Queue, "timing", rs.c.Timing(),
				"missed", rs.c.Missed, "next", rs.c.next(later(now, tr.after)))
		}
		tr.after = later(tr.after, rs.after)
	}
	for name := range r.tracks {
		if _, ok := snap[name]; !ok {
			delete(r.tracks, name)
			r.m.forget(name)
			r.cfg.log.Info("schedule removed", "schedule", name)
		}
	}
	r.m.schedules.Set(float64(len(r.tracks)))
}
