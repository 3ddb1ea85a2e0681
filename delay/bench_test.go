package delay_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// BenchmarkMove1M submits 1,000,000 tasks with delays uniform over 0-60s
// to the default ladder, 100,000 a second, with one delay service running,
// and checks every publish with a read_committed reader. It reports the
// moves per second (bucket to bucket or queue) in the busiest second, the
// lateness of the publishes (queue append time minus due time) and how
// many were early (must be zero). The broker runs as a separate process.
// Run with -benchtime 1x: one iteration takes about 80 seconds.
func BenchmarkMove1M(b *testing.B) {
	for range b.N {
		benchMove(b, 1_000_000, 60*time.Second)
	}
}

// BenchmarkMoveBacklog measures the service's moving capacity alone:
// 1,000,000 tasks wait in the smallest bucket, all due by the time the
// service starts, and go to their queue in as few seconds as it can.
func BenchmarkMoveBacklog(b *testing.B) {
	for range b.N {
		benchBacklog(b, 1_000_000)
	}
}

// submitRate is the pace of BenchmarkMove1M's submissions, in tasks per
// second.
const submitRate = 100_000

// startBroker runs the embedded broker in its own process, as in
// production the brokers are not in the delay service's process: the
// benchmark's own garbage collector then does not scan every record the
// broker holds.
func startBroker(b *testing.B) broker.Conn {
	_, addr := testutil.StartBrokerProcess(b, "", "")
	return broker.Conn{Brokers: []string{addr}}
}

func benchMove(b *testing.B, n int, spread time.Duration) {
	conn := startBroker(b)
	createQueue(b, conn, "bench", 8)
	v := newVerifier(b, conn, "bench", n)
	reg := prometheus.NewRegistry()
	runService(b, delay.Conn(conn), delay.Registerer(reg), delay.Logger(testLogger()))
	peak := sampleMoves(b, reg)

	prod, err := producer.New(producer.Conn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	var failed atomic.Int64
	for i := range n {
		if i%1000 == 0 {
			// Submit at submitRate: the service then has to move about
			// as many tasks per second at its busiest.
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / submitRate)))
		}
		due := time.Now().Add(time.Duration(rng.Int64N(int64(spread)))).Truncate(time.Millisecond)
		v.due[i] = due.UnixMilli()
		prod.SubmitAsync(context.Background(), onceq.Task{ID: benchID(i), Queue: "bench", Due: due, Payload: []byte("p")},
			func(_ producer.Receipt, err error) {
				if err != nil {
					failed.Add(1)
				}
			})
	}
	if err := prod.Flush(context.Background()); err != nil || failed.Load() > 0 {
		b.Fatalf("submitting: %v, %d failed", err, failed.Load())
	}
	submitted := time.Since(start)
	b.Logf("submitted %d tasks in %v (%.0f tasks/s)", n, submitted.Round(time.Millisecond), float64(n)/submitted.Seconds())
	v.wait(b, spread+time.Minute)
	v.report(b, peak())
}

func benchBacklog(b *testing.B, n int) {
	conn := startBroker(b)
	createQueue(b, conn, "bench", 8)
	p := delay.DefaultPlanner()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	bucket := p.Topics()[0]
	if err := adm.CreateTopic(context.Background(), bucket, delay.DefaultBucketPartitions, delay.BucketTopicConfigs()); err != nil {
		b.Fatal(err)
	}
	v := newVerifier(b, conn, "bench", n)
	due := time.Now().Add(time.Second).Truncate(time.Millisecond)
	for i := range n {
		v.due[i] = due.UnixMilli()
	}
	writeRaw(b, conn, n, func(i int) *kgo.Record {
		return (&onceq.Task{ID: benchID(i), Queue: "bench", Due: due, Payload: []byte("p")}).Record(bucket)
	})
	time.Sleep(time.Until(due))
	reg := prometheus.NewRegistry()
	start := time.Now()
	runService(b, delay.Conn(conn), delay.Registerer(reg), delay.Logger(testLogger()))
	peak := sampleMoves(b, reg)
	v.wait(b, 5*time.Minute)
	took := time.Since(start)
	b.ReportMetric(float64(n)/took.Seconds(), "tasks/s")
	b.ReportMetric(peak(), "peak-moves/s")
	b.Logf("%d overdue tasks published in %v (%.0f tasks/s, including joining the group)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	v.check(b)
}

func benchID(i int) string { return "b-" + strconv.Itoa(i) }

// writeRaw writes n records as fast as a plain idempotent client goes.
func writeRaw(b *testing.B, conn broker.Conn, n int, rec func(int) *kgo.Record) {
	cl, err := conn.NewClient(kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(200_000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	for i := range n {
		cl.Produce(context.Background(), rec(i), func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(&err)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if e := failed.Load(); e != nil {
		b.Fatal(*e)
	}
}

// verifier reads a queue as a read_committed consumer and keeps, per task
// index, how often it was published and its lateness.
type verifier struct {
	cl    *kgo.Client
	due   []int64 // unix ms
	mu    sync.Mutex
	count []uint8
	late  []int64 // ms: append time minus due
	seen  int
	done  chan struct{}
}

func newVerifier(b *testing.B, conn broker.Conn, queue string, n int) *verifier {
	cl, err := conn.NewClient(kgo.ConsumeTopics(queue), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	v := &verifier{cl: cl, due: make([]int64, n), count: make([]uint8, n), late: make([]int64, n), done: make(chan struct{})}
	go func() {
		defer close(v.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			v.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				var id string
				for _, h := range r.Headers {
					if h.Key == onceq.HeaderID {
						id = string(h.Value)
					}
				}
				i, err := strconv.Atoi(strings.TrimPrefix(id, "b-"))
				if err != nil || i < 0 || i >= n {
					return
				}
				v.count[i]++
				v.seen++
				if v.count[i] == 1 {
					v.late[i] = r.Timestamp.UnixMilli() - v.due[i]
				}
			})
			v.mu.Unlock()
		}
	}()
	b.Cleanup(func() { cl.Close(); <-v.done })
	return v
}

func (v *verifier) wait(b *testing.B, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		v.mu.Lock()
		seen := v.seen
		v.mu.Unlock()
		if seen >= len(v.due) {
			time.Sleep(time.Second) // duplicates, if any, show up now
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d tasks published after %v", seen, len(v.due), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check fails the benchmark on a missing, duplicated or early task.
func (v *verifier) check(b *testing.B) (late []int64, early int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	missing, dups := 0, 0
	for i, c := range v.count {
		switch {
		case c == 0:
			missing++
		case c > 1:
			dups++
		}
		if c > 0 && v.late[i] < 0 {
			early++
		}
	}
	if missing+dups+early > 0 {
		b.Errorf("%d tasks: %d missing, %d duplicated, %d early", len(v.count), missing, dups, early)
	}
	late = slices.Clone(v.late)
	slices.Sort(late)
	return late, early
}

func (v *verifier) report(b *testing.B, peakMoves float64) {
	late, early := v.check(b)
	q := func(f float64) float64 { return float64(late[min(len(late)-1, int(f*float64(len(late))))]) }
	b.ReportMetric(peakMoves, "peak-moves/s")
	b.ReportMetric(float64(early), "early")
	b.ReportMetric(q(0.5), "p50-late-ms")
	b.ReportMetric(q(0.99), "p99-late-ms")
	b.ReportMetric(float64(late[len(late)-1]), "max-late-ms")
	b.Logf("peak %.0f moves/s; lateness p50 %.0fms p99 %.0fms p99.9 %.0fms max %dms; %d early",
		peakMoves, q(0.5), q(0.99), q(0.999), late[len(late)-1], early)
}

// sampleMoves samples onceq_delay_moves_total and returns a function that
// gives the most moves seen in one second.
func sampleMoves(b *testing.B, reg *prometheus.Registry) func() float64 {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		peak float64
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		type sample struct {
			at time.Time
			n  float64
		}
		var hist []sample
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				n := totalMoves(reg)
				hist = append(hist, sample{now, n})
				for len(hist) > 1 && now.Sub(hist[0].at) > time.Second {
					hist = hist[1:]
				}
				if d := now.Sub(hist[0].at); d >= 900*time.Millisecond {
					mu.Lock()
					peak = max(peak, (n-hist[0].n)/d.Seconds())
					mu.Unlock()
				}
			}
		}
	}()
	b.Cleanup(func() { cancel(); <-done })
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

func totalMoves(reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "onceq_delay_moves_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// BenchmarkRSS10M fills the default ladder's buckets with 10,000,000 tasks
// due in 1 to 24 hours, runs "onceq delay" as a separate process against
// them and reports its resident memory: the peak (VmHWM) and after it has
// settled (VmRSS). The broker runs in the benchmark's process.
func BenchmarkRSS10M(b *testing.B) {
	for range b.N {
		benchRSS(b, 10_000_000)
	}
}

func benchRSS(b *testing.B, n int) {
	_, conn := testutil.StartBroker(b, "")
	p := delay.DefaultPlanner()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	for _, t := range p.Topics() {
		if err := adm.CreateTopic(context.Background(), t, delay.DefaultBucketPartitions, delay.BucketTopicConfigs()); err != nil {
			b.Fatal(err)
		}
	}
	createQueue(b, conn, "bench", 8)
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Now()
	start := time.Now()
	writeRaw(b, conn, n, func(i int) *kgo.Record {
		due := now.Add(time.Hour + time.Duration(rng.Int64N(int64(23*time.Hour)))).Truncate(time.Millisecond)
		hop := p.Route(now, due)
		return (&onceq.Task{ID: benchID(i), Queue: "bench", Due: due, Enqueued: now.Truncate(time.Millisecond)}).Record(hop.Topic)
	})
	b.Logf("wrote %d waiting tasks in %v", n, time.Since(start).Round(time.Millisecond))
	proc := testutil.Start(b, "delay", "--brokers", conn.Brokers[0], "--state-dir", filepath.Join(b.TempDir(), "state"), "--metrics-addr", "")
	proc.WaitOutput(b, `partitions assigned`, time.Minute)
	time.Sleep(20 * time.Second)
	hwm, rss, err := testutil.ProcMem(proc.Cmd.Process.Pid)
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	st, err := delay.Stats(context.Background(), conn, p, delay.DefaultGroup)
	if err != nil {
		b.Fatal(err)
	}
	var waiting int64
	for _, s := range st {
		waiting += s.Waiting
	}
	b.ReportMetric(float64(hwm)/(1<<20), "peak-RSS-MB")
	b.ReportMetric(float64(rss)/(1<<20), "RSS-MB")
	b.Logf("onceq delay with %d tasks waiting: peak RSS %d MB, RSS %d MB", waiting, hwm>>20, rss>>20)
}
