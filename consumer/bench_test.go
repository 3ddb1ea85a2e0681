package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// preload writes n 100-byte tasks to a new queue of 8 partitions;
// generated says whether their IDs are onceq's or a client's.
func preload(b *testing.B, conn broker.Conn, queue string, n int, generated bool) {
	b.Helper()
	testutil.CreateTopic(b, conn, queue, 8)
	if err := bench.Preload(context.Background(), conn, queue, n, generated); err != nil {
		b.Fatal(err)
	}
}

// drainWorker runs a noop worker of a fresh group over queue until it has
// handled n tasks and committed them, and returns the time it took.
func drainWorker(b *testing.B, conn broker.Conn, queue, group string, n int, g consumer.Guarantee) time.Duration {
	b.Helper()
	return drainWorkerWith(b, conn, queue, group, n, consumer.WithGuarantee(g))
}

// waitCommitted waits, at most 10 minutes, until the group's committed
// offsets cover n records.
func waitCommitted(b *testing.B, conn broker.Conn, group string, n int64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := bench.WaitCommitted(ctx, conn, group, n); err != nil {
		b.Fatal(err)
	}
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
	n := bench.EnvTasks()
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
	n := bench.EnvTasks()
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
		hwm, _, err := testutil.ProcMem(p.Cmd.Process.Pid)
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

// BenchmarkRestoreChangelog measures what a worker that lost its
// checkpoint dir pays to get back: a worker drains n tasks with IDs a
// client chose (idempotency keys, in the changelog's mark records), then,
// in each iteration, a worker of the same group on an empty checkpoint
// dir restores all 8 partitions from the changelog through the broker,
// when one more task arrives in each. It reports the changelog records
// and the processed IDs restored, the slowest partition's restore (the 8
// run at once, so this is the wall time) and IDs restored per second of
// it.
func BenchmarkRestoreChangelog(b *testing.B) {
	n := bench.EnvTasks()
	_, conn := testutil.StartBroker(b, "")
	preload(b, conn, "restore", n, false)
	const group = "restore"
	drainWorker(b, conn, "restore", group, n, consumer.ExactlyOnce)
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var records, ids int
	var slowest time.Duration
	committed := n
	for i := 0; b.Loop(); i++ {
		// Tasks until every partition has one, so that all 8 restore.
		before, hit := committed, map[int32]bool{}
		for j := 0; len(hit) < 8; j++ {
			rc, err := p.Submit(context.Background(), onceq.Task{ID: fmt.Sprintf("more-%d-%d", i, j), Queue: "restore"})
			if err != nil {
				b.Fatal(err)
			}
			hit[rc.Partition] = true
			committed++
		}
		var logs restoreLog
		ctx, cancel := context.WithCancel(context.Background())
		w, err := consumer.New(consumer.Conn(conn), consumer.Group(group), consumer.Queues("restore"), consumer.CheckpointDir(b.TempDir()),
			consumer.NoSync(), consumer.Logger(slog.New(&logs)), consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })))
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		waitCommitted(b, conn, group, int64(committed))
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		got, took, parts := logs.restored()
		if parts != 8 {
			b.Fatalf("%d partitions restored, want 8", parts)
		}
		records += got
		ids += before // the IDs before this iteration's
		slowest += took
	}
	b.ReportMetric(float64(records)/float64(b.N), "records")
	b.ReportMetric(float64(ids)/float64(b.N), "ids")
	b.ReportMetric(slowest.Seconds()/float64(b.N), "restore-s")
	b.ReportMetric(float64(ids)/slowest.Seconds(), "ids/s")
}

// restoreLog is a slog.Handler that keeps what the worker's "partition
// restored" lines say.
type restoreLog struct {
	mu      sync.Mutex
	records int
	slowest time.Duration
	parts   int
}

func (l *restoreLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *restoreLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *restoreLog) WithGroup(string) slog.Handler            { return l }

func (l *restoreLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "partition restored" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parts++
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "changelog_records":
			l.records += int(a.Value.Int64())
		case "took":
			l.slowest = max(l.slowest, a.Value.Duration())
		}
		return true
	})
	return nil
}

func (l *restoreLog) restored() (records int, slowest time.Duration, parts int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.records, l.slowest, l.parts
}

// BenchmarkTaskRecords drains a pre-loaded queue of 100-byte tasks (8
// partitions, generated IDs) with an exactly-once noop worker, with task
// records on (a JSON line per task, one Kafka record per partition per
// commit) and off, side by side in alternating order, and reports both
// rates and their ratio. Run:
//
//	go test ./consumer -run '^$' -bench TaskRecords -benchtime 4x
func BenchmarkTaskRecords(b *testing.B) {
	n := bench.EnvTasks()
	_, conn := testutil.StartBroker(b, "")
	preload(b, conn, "bench", n, true)
	// The first drain of a process is the slowest (the broker and the heap
	// warm up): it is left out.
	drainWorkerWith(b, conn, "bench", "warm-up", n, consumer.TaskRecords(false))
	var on, off time.Duration
	runs := 0
	for i := 0; b.Loop(); i++ {
		drains := []func(){
			func() {
				on += drainWorkerWith(b, conn, "bench", fmt.Sprintf("on-%d", i), n, consumer.TaskRecords(true))
			},
			func() {
				off += drainWorkerWith(b, conn, "bench", fmt.Sprintf("off-%d", i), n, consumer.TaskRecords(false))
			},
		}
		drains[i%2]()
		drains[(i+1)%2]()
		runs++
	}
	rate := func(d time.Duration) float64 { return float64(n*runs) / d.Seconds() }
	b.ReportMetric(rate(on), "records-on-tasks/s")
	b.ReportMetric(rate(off), "records-off-tasks/s")
	b.ReportMetric(rate(on)/rate(off), "on/off")
}

// drainWorkerWith drains queue with an exactly-once noop worker with opts.
func drainWorkerWith(b *testing.B, conn broker.Conn, queue, group string, n int, opts ...consumer.Opt) time.Duration {
	b.Helper()
	took, err := bench.Drain(context.Background(), conn, queue, group, b.TempDir(), n, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return took
}
