package consumer_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// benchTasks is the queue size of the throughput benchmarks: 1,000,000, or
// ONCEQ_BENCH_TASKS.
func benchTasks() int {
	if n, err := strconv.Atoi(os.Getenv("ONCEQ_BENCH_TASKS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// preload writes n 100-byte tasks to an 8-partition queue; generated says
// whether their IDs are onceq's (onceq.Task.GeneratedID) or a client's.
func preload(b *testing.B, conn broker.Conn, queue string, n int, generated bool) {
	b.Helper()
	testutil.CreateTopic(b, conn, queue, 8)
	cl, err := conn.NewClient(kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	payload := []byte(strings.Repeat("x", 100))
	now := time.Now()
	for i := 0; i < n; i++ {
		t := onceq.Task{ID: "t-" + strconv.Itoa(i), GeneratedID: generated, Queue: queue, Payload: payload}
		t.Resolve(now)
		cl.Produce(ctx, t.Record(queue), nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// drainWorker runs a noop worker of a fresh group over queue until it has
// handled n tasks and committed them, and returns the time it took.
func drainWorker(b *testing.B, conn broker.Conn, queue, group string, n int, g consumer.Guarantee) time.Duration {
	b.Helper()
	var handled atomic.Int64
	h := consumer.HandlerFunc(func(context.Context, *consumer.Task) error { handled.Add(1); return nil })
	w, err := consumer.New(consumer.Conn(conn), consumer.Group(group), consumer.Queues(queue), consumer.CheckpointDir(b.TempDir()),
		consumer.WithHandler(h), consumer.WithGuarantee(g), consumer.NoSync())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- w.Run(ctx) }()
	waitCommitted(b, conn, group, int64(n))
	took := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if handled.Load() < int64(n) {
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	return took
}

// waitCommitted waits until the group's committed offsets cover n records.
func waitCommitted(b *testing.B, conn broker.Conn, group string, n int64) {
	b.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		if lags, err := adm.GroupLag(context.Background(), group); err == nil {
			var done int64
			for _, l := range lags {
				if l.Committed > 0 {
					done += l.Committed
				}
			}
			if done >= n {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("group %s did not commit %d records in time", group, n)
}

// txnCopyLoop is franz-go's own exactly-once copy loop (the
// GroupTransactSession example, bench.CopyLoop) copying n records of queue
// to out; it returns the time it took.
func txnCopyLoop(b *testing.B, conn broker.Conn, queue, out string, n int) time.Duration {
	b.Helper()
	testutil.CreateTopic(b, conn, out, 8)
	took, err := bench.CopyLoop(context.Background(), conn, queue, out, "txn-copy-"+out, n, nil)
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// BenchmarkWorkerThroughput drains pre-loaded queues of 100-byte tasks (8
// partitions) side by side: franz-go's GroupTransactSession copy loop, the
// worker exactly-once with a noop handler over tasks with generated IDs
// (no idempotency marks) and over tasks with IDs a client chose (a mark
// each), and the worker at-least-once. It reports each rate and the
// ratios.
func BenchmarkWorkerThroughput(b *testing.B) {
	n := benchTasks()
	_, conn := testutil.StartBroker(b, "")
	preload(b, conn, "bench", n, true)
	preload(b, conn, "bench-keys", n, false)
	// Each run's time, summed over the iterations.
	var loop, eos, keys, alo time.Duration
	runs := 0
	for i := 0; b.Loop(); i++ {
		loop += txnCopyLoop(b, conn, "bench", fmt.Sprintf("bench-copy-%d", i), n)
		// The drains take turns at going first: a later one runs on a
		// warmer broker and heap (up to a quarter faster), so a fixed
		// order would bias the ratios. Run -benchtime 3x for every order.
		drains := []func(){
			func() { eos += drainWorker(b, conn, "bench", fmt.Sprintf("eos-%d", i), n, consumer.ExactlyOnce) },
			func() {
				keys += drainWorker(b, conn, "bench-keys", fmt.Sprintf("eos-keys-%d", i), n, consumer.ExactlyOnce)
			},
			func() { alo += drainWorker(b, conn, "bench", fmt.Sprintf("alo-%d", i), n, consumer.AtLeastOnce) },
		}
		for j := range drains {
			drains[(i+j)%len(drains)]()
		}
		runs++
	}
	rate := func(d time.Duration) float64 { return float64(n*runs) / d.Seconds() }
	b.ReportMetric(rate(eos), "eos-tasks/s")
	b.ReportMetric(rate(keys), "eos-keys-tasks/s")
	b.ReportMetric(rate(loop), "txnloop-tasks/s")
	b.ReportMetric(rate(alo), "alo-tasks/s")
	b.ReportMetric(rate(eos)/rate(loop), "eos/txnloop")
	b.ReportMetric(rate(eos)/rate(alo), "eos/alo")
	b.ReportMetric(rate(keys)/rate(alo), "eos-keys/alo")
}

// BenchmarkWorkerLatency offers tasks at 50,000/s for 10 s through the
// producer while an exactly-once worker runs them, and reports the
// percentiles of the time from submission to handler start.
func BenchmarkWorkerLatency(b *testing.B) {
	const rate, seconds = 50_000, 10
	_, conn := testutil.StartBroker(b, "")
	testutil.CreateTopic(b, conn, "lat", 8)
	for i := 0; b.Loop(); i++ {
		samples := make([]time.Duration, 0, rate*seconds)
		sampled := make(chan time.Duration, rate*seconds)
		h := consumer.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			if at, err := strconv.ParseInt(string(t.Payload), 10, 64); err == nil {
				sampled <- time.Since(time.Unix(0, at))
			}
			return nil
		})
		w, err := consumer.New(consumer.Conn(conn), consumer.Group(fmt.Sprintf("lat-%d", i)), consumer.Queues("lat"),
			consumer.CheckpointDir(b.TempDir()), consumer.WithHandler(h))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		time.Sleep(2 * time.Second) // joined and restored
		p, err := producer.New(producer.Conn(conn))
		if err != nil {
			b.Fatal(err)
		}
		tick := time.NewTicker(10 * time.Millisecond)
		for sent := 0; sent < rate*seconds; {
			<-tick.C
			for j := 0; j < rate/100; j++ {
				p.SubmitAsync(ctx, onceq.Task{Queue: "lat", Payload: []byte(strconv.FormatInt(time.Now().UnixNano(), 10))}, nil)
				sent++
			}
		}
		tick.Stop()
		_ = p.Flush(ctx)
		p.Close()
		deadline := time.After(time.Minute)
		for len(samples) < rate*seconds {
			select {
			case d := <-sampled:
				samples = append(samples, d)
			case <-deadline:
				b.Fatalf("only %d of %d tasks ran", len(samples), rate*seconds)
			}
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		slices.Sort(samples)
		pct := func(q float64) float64 { return float64(samples[int(q*float64(len(samples)-1))].Microseconds()) / 1000 }
		b.ReportMetric(pct(0.5), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
		b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1000, "max-ms")
	}
}

// BenchmarkWorkerRSS drains a pre-loaded queue with an "onceq worker"
// process (noop handler, exactly-once) and reports its peak resident memory
// (VmHWM) and its rate. ONCEQ_BENCH_WORKER_FLAGS adds worker flags.
func BenchmarkWorkerRSS(b *testing.B) {
	n := benchTasks()
	_, conn := testutil.StartBroker(b, "")
	preload(b, conn, "rss", n, false)
	for i := 0; b.Loop(); i++ {
		group := fmt.Sprintf("rss-%d", i)
		start := time.Now()
		args := []string{"worker", "--brokers", conn.Brokers[0], "--queue", "rss", "--group", group, "--handler", "noop",
			"--checkpoint-dir", b.TempDir(), "--metrics-addr", "", "--log-level", "warn", "--delay-service=false"}
		p := testutil.Start(b, append(args, strings.Fields(os.Getenv("ONCEQ_BENCH_WORKER_FLAGS"))...)...)
		waitCommitted(b, conn, group, int64(n))
		took := time.Since(start)
		hwm, err := peakRSS(p.Cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		p.Signal(syscall.SIGTERM)
		if _, err := p.Wait(time.Minute); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MB")
		b.ReportMetric(float64(n)/took.Seconds(), "tasks/s")
	}
}

// peakRSS reads a process's VmHWM in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
