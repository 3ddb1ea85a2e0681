package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/delay"
)

// runDelay submits every task with a delay uniform from 0 to MaxDelay
// while Workers delay service instances move them through the buckets of
// the default ladder to the queue. A read_committed reader of the queue
// records each task's lateness: publish time (the record's timestamp,
// stamped by the service) minus due time, and the latency from due time
// to when the reader saw it. Nothing may be early.
//
// The services join the default delay group (onceq-delay), so on a shared
// broker they share the buckets with the delay services already running
// there, as another instance would.
func runDelay(ctx context.Context, e *env, l *load, seed uint64) ([]RunResult, error) {
	q := e.name("in")
	if err := e.createTopics(ctx, q); err != nil {
		return nil, err
	}
	sctx, stopServices := context.WithCancel(ctx)
	errs := make(chan error, e.o.Workers)
	for i := range e.o.Workers {
		svc, err := delay.NewService(delay.Conn(e.conn), delay.Logger(e.o.Logger),
			delay.StateDir(e.dir(fmt.Sprintf("delay-%d", i))))
		if err != nil {
			stopServices()
			return nil, err
		}
		go func() { errs <- svc.Run(sctx) }()
	}
	running := e.o.Workers
	failed := func() error {
		select {
		case err := <-errs:
			running--
			return fmt.Errorf("bench: a delay service stopped: %w", errors.Join(err, errors.New("before the run ended")))
		default:
			return nil
		}
	}
	stop := func() error {
		stopServices()
		var all []error
		for range running {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}

	lateness, latency := newRecorder(), newRecorder()
	var (
		mu       sync.Mutex
		seen     = make([]uint8, len(l.want))
		records  atomic.Int64
		lastSeen atomic.Int64
		early    int
	)
	m := startMeter()
	t, err := startTailer(e.conn, q, func(r *kgo.Record, at time.Time) {
		task, err := onceq.FromRecord(r)
		i, ok := l.index(task.ID)
		if err != nil || !ok || task.Due.IsZero() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[i] >= l.want[i] {
			return // a duplicate: the verifier counts it
		}
		seen[i]++
		lateness.record(r.Timestamp.Sub(task.Due))
		latency.record(at.Sub(task.Due))
		if at.Before(task.Due) {
			early++
		}
		records.Add(1)
		lastSeen.Store(at.UnixNano())
		m.add(1)
	})
	if err != nil {
		_ = stop()
		return nil, err
	}
	defer t.stop()
	if err := e.waitJoined(ctx, delay.DefaultGroup, e.o.Workers, failed); err != nil {
		_ = stop()
		return nil, err
	}
	p, err := e.newProducer()
	if err != nil {
		_ = stop()
		return nil, err
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(seed, 2))
	start := time.Now()
	end := e.o.Progress.phase("delayed tasks published", int64(len(l.order)), records.Load)
	err = l.submitAll(ctx, p, l.order, q, e.o.Rate, func(t *onceq.Task) {
		t.Due = time.Now().Add(time.Duration(rng.Int64N(int64(e.o.MaxDelay) + 1)))
	}, nil)
	if err == nil {
		err = e.waitRecords(ctx, &records, int64(len(l.order)), failed)
	}
	end()
	timeline := m.finish()
	if serr := stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	run := newRun(runDelaySvc, false, len(l.order), l.size, time.Unix(0, lastSeen.Load()).Sub(start))
	run.Timeline, run.Latency, run.Lateness = timeline, latency.summary(), lateness.summary()
	mu.Lock()
	x := expectation{l: l, due: true, visibleEarly: early}
	mu.Unlock()
	run.Verification, err = e.verify(ctx, q, x)
	return []RunResult{run}, err
}

// waitRecords waits until n reaches want, failing when it stops moving for
// two minutes.
func (e *env) waitRecords(ctx context.Context, n *atomic.Int64, want int64, failed func() error) error {
	last, lastMove := n.Load(), time.Now()
	for n.Load() < want {
		if err := failed(); err != nil {
			return err
		}
		if c := n.Load(); c != last {
			last, lastMove = c, time.Now()
		}
		if time.Since(lastMove) > 2*time.Minute {
			return fmt.Errorf("bench: %d of %d records after no progress for 2 minutes", last, want)
		}
		if err := sleep(ctx, 25*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
