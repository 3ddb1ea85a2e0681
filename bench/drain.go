package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
)

// The throughput benchmarks of the worker (consumer's, and the Watermill
// comparison in bench/watermill) drain a queue written beforehand: Preload
// writes it, Drain runs a worker over it, WaitCommitted tells when a group
// is through.

// EnvTasks is the queue size of the Go throughput benchmarks: 1,000,000,
// or the environment's ONCEQ_BENCH_TASKS.
func EnvTasks() int {
	if n, err := strconv.Atoi(os.Getenv("ONCEQ_BENCH_TASKS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// Preload writes n tasks of 100 bytes, IDs "t-0" to "t-<n-1>", to queue;
// generated marks the IDs as onceq's own (onceq.Task.GeneratedID) rather
// than a client's.
func Preload(ctx context.Context, conn broker.Conn, queue string, n int, generated bool) error {
	return PreloadPayload(ctx, conn, queue, n, generated, []byte(strings.Repeat("x", 100)))
}

// PreloadPayload is Preload with tasks of the given payload.
func PreloadPayload(ctx context.Context, conn broker.Conn, queue string, n int, generated bool, payload []byte) error {
	cl, err := conn.NewClient(kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	now := time.Now()
	var failed atomic.Pointer[error]
	for i := range n {
		t := onceq.Task{ID: "t-" + strconv.Itoa(i), GeneratedID: generated, Queue: queue, Payload: payload}
		t.Resolve(now)
		cl.Produce(ctx, t.Record(queue), func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if err := failed.Load(); err != nil {
		return fmt.Errorf("bench: preloading %s: %w", queue, *err)
	}
	return nil
}

// Drain runs a worker of a new group over queue, with a noop handler and
// the options opts, until the group committed n records, and returns the
// time that took from the worker's start.
func Drain(ctx context.Context, conn broker.Conn, queue, group, dir string, n int, opts ...consumer.Opt) (time.Duration, error) {
	var handled atomic.Int64
	w, err := consumer.New(append([]consumer.Opt{consumer.Conn(conn), consumer.Group(group), consumer.Queues(queue),
		consumer.CheckpointDir(dir), consumer.NoSync(),
		consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error { handled.Add(1); return nil }))},
		opts...)...)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A worker that stops early (it failed) ends the wait too.
	waitCtx, stopWait := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		err := w.Run(ctx)
		stopWait()
		done <- err
	}()
	err = WaitCommitted(waitCtx, conn, group, int64(n))
	took := time.Since(start)
	cancel()
	if runErr := <-done; runErr != nil {
		return 0, runErr
	}
	if err != nil {
		return 0, err
	}
	if handled.Load() < int64(n) {
		return 0, fmt.Errorf("bench: the worker handled %d of %d tasks", handled.Load(), n)
	}
	return took, nil
}

// WaitCommitted waits until group's committed offsets add up to n records
// or more, or ctx ends.
func WaitCommitted(ctx context.Context, conn broker.Conn, group string, n int64) error {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if lags, err := adm.GroupLag(ctx, group); err == nil {
			var done int64
			for _, l := range lags {
				done += max(l.Committed, 0)
			}
			if done >= n {
				return nil
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("bench: group %s did not commit %d records: %w", group, n, ctx.Err())
		}
	}
}
