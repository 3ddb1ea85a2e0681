package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/handlers"
)

// workers are consumer.Workers of one group in the bench's process.
type workers struct {
	group  string
	cancel context.CancelFunc
	errs   chan error
	n      int
	first  atomic.Int64 // unix nanoseconds of the first handler start
	last   atomic.Int64 // unix nanoseconds of the last handler finish
	m      *meter
}

// startWorkers runs o.Workers workers of group over queue in, each task
// emitted to out. Exactly-once workers count each ID's runs in their state
// and carry the count in RunsHeader: the worker's count: handler;
// at-least-once workers have no state and copy. Each handler run first
// sleeps as l's handler-time profile says. lat, if not nil, records the
// time from submission to handler start.
func (e *env) startWorkers(ctx context.Context, l *load, group, in, out string, g consumer.Guarantee, lat *recorder) (*workers, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &workers{group: group, cancel: cancel, errs: make(chan error, e.o.Workers), n: e.o.Workers, m: startMeter()}
	h := w.handler(out, g == consumer.ExactlyOnce, lat, l.workFor)
	for i := range e.o.Workers {
		cw, err := consumer.New(consumer.Conn(e.conn), consumer.Group(group), consumer.Queues(in),
			consumer.CheckpointDir(e.dir(fmt.Sprintf("%s-w%d", group, i))), consumer.WithHandler(h),
			consumer.WithGuarantee(g), consumer.Concurrency(e.o.Concurrency), consumer.CommitInterval(e.o.CommitInterval),
			consumer.Logger(e.o.Logger))
		if err != nil {
			cancel()
			return nil, err
		}
		go func() { w.errs <- cw.Run(ctx) }()
	}
	return w, nil
}

// handler is the bench's handler: it sleeps work(t.ID), the task's share
// of the profile, and runs the worker's count: handler (handlers.Count,
// which counts the ID's runs and writes RunsHeader) if count, else its
// copy: handler, both emitting to out. A run whose context ends while it
// sleeps returns the context's error, as a handler that honours its
// time-to-run does.
func (w *workers) handler(out string, count bool, lat *recorder, work func(id string) time.Duration) consumer.Handler {
	next := handlers.Copy(out)
	if count {
		next = handlers.Count(out)
	}
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		now := time.Now()
		w.first.CompareAndSwap(0, now.UnixNano())
		w.m.add(1)
		if at, ok := stamped(t.Payload); ok && lat != nil {
			lat.record(now.Sub(at))
		}
		if d := work(t.ID); d > 0 {
			if err := sleep(ctx, d); err != nil {
				return err
			}
		}
		if err := next.Handle(ctx, t); err != nil {
			return err
		}
		w.finished(time.Now())
		return nil
	})
}

// finished records a handler's finish at now, if it is the last so far.
func (w *workers) finished(now time.Time) {
	ns := now.UnixNano()
	for {
		last := w.last.Load()
		if ns <= last || w.last.CompareAndSwap(last, ns) {
			return
		}
	}
}

// lastFinish is the time the last handler finished, or zero.
func (w *workers) lastFinish() time.Time {
	if ns := w.last.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// started is the time of the first handler start, or zero.
func (w *workers) started() time.Time {
	if ns := w.first.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// stop stops the workers and returns the first error one of them had.
func (w *workers) stop() error {
	w.cancel()
	w.m.finish()
	var errs []error
	for range w.n {
		errs = append(errs, <-w.errs)
	}
	return errors.Join(errs...)
}

// failed returns a worker's error if one stopped early.
func (w *workers) failed() error {
	select {
	case err := <-w.errs:
		w.n--
		if err == nil {
			err = errors.New("stopped before the run ended")
		}
		return fmt.Errorf("bench: a worker of %s: %w", w.group, err)
	default:
		return nil
	}
}

// waitJoined waits until group is stable with at least members members.
func (e *env) waitJoined(ctx context.Context, group string, members int, failed func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := failed(); err != nil {
			return err
		}
		gs, err := e.adm.Kadm().DescribeGroups(ctx, group)
		if err == nil {
			if g, ok := gs[group]; ok && g.State == "Stable" && len(g.Members) >= members {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: group %s did not settle with %d members in 2 minutes", group, members)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitConsumed waits until group has committed every record of topic, as
// far as topic's end offsets went when submitted was closed, and returns
// when it saw that.
func (e *env) waitConsumed(ctx context.Context, group, topic string, submitted <-chan struct{}, failed func() error) (time.Time, error) {
	lastMove, lastSum := time.Now(), int64(-1)
	for {
		if err := failed(); err != nil {
			return time.Time{}, err
		}
		done := false
		select {
		case <-submitted:
			done = true
		default:
		}
		if done {
			ends, err := e.adm.Kadm().ListEndOffsets(ctx, topic)
			offs, ferr := e.adm.Kadm().FetchOffsets(ctx, group)
			if err == nil && ferr == nil {
				all, sum := true, int64(0)
				ends.Each(func(o kadm.ListedOffset) {
					c, ok := offs.Lookup(o.Topic, o.Partition)
					if o.Offset > 0 && (!ok || c.At < o.Offset) {
						all = false
					}
					if ok {
						sum += c.At
					}
				})
				if all {
					return time.Now(), nil
				}
				if sum != lastSum {
					lastSum, lastMove = sum, time.Now()
				}
			}
			if time.Since(lastMove) > 2*time.Minute {
				return time.Time{}, fmt.Errorf("bench: group %s made no progress on %s for 2 minutes", group, topic)
			}
		}
		if err := sleep(ctx, 25*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
