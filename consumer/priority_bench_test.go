package consumer_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// BenchmarkPriority: a worker of 8 slots whose handler takes 1 ms drains a
// backlog of priority-0 tasks on a queue of 8 partitions; once it runs
// them, 100 probe tasks are submitted to the same queue, 20 ms apart, and
// their submit->start time is measured, p50 and p99. Side by side: probes
// of priority 9 and probes of priority 0, behind backlogs of 20,000 tasks
// (less than the worker buffers, MaxBufferedRecords: 30,000) and 100,000
// (ONCEQ_BENCH_PRIORITY_BACKLOGS picks others, e.g. "20000,100000"), in
// two cases: the worker joins a queue that holds the backlog already
// (join), or the backlog is written while the worker runs (burst). Behind
// more than it buffers, the worker reads ahead for the probes
// (PriorityLookahead). ONCEQ_BENCH_PRIORITY_PAYLOAD_BYTES (random bytes,
// which do not compress; default 100 bytes of "x") and
// ONCEQ_BENCH_PRIORITY_HANDLER_MS (default 1) set the backlog's tasks'
// payloads and handler time, and name them in the sub-benchmarks. Run:
//
//	go test ./consumer -run '^$' -bench BenchmarkPriority -benchtime 1x
func BenchmarkPriority(b *testing.B) {
	backlogs := testutil.EnvCounts(b, "ONCEQ_BENCH_PRIORITY_BACKLOGS", []int{20_000, 100_000}, 0, 10_000_000)
	sizes := testutil.EnvCounts(b, "ONCEQ_BENCH_PRIORITY_PAYLOAD_BYTES", []int{0}, 1, 1<<20) // 0: 100 bytes of "x"
	handlerMS := testutil.EnvCounts(b, "ONCEQ_BENCH_PRIORITY_HANDLER_MS", []int{1}, 0, 60_000)
	named := os.Getenv("ONCEQ_BENCH_PRIORITY_PAYLOAD_BYTES") != "" || os.Getenv("ONCEQ_BENCH_PRIORITY_HANDLER_MS") != ""
	var setup []backlogSetup
	for _, size := range sizes {
		for _, ms := range handlerMS {
			setup = append(setup, backlogSetup{size: size, handler: time.Duration(ms) * time.Millisecond, named: named})
		}
	}
	_, conn := testutil.StartBroker(b, "")
	run := 0
	for _, backlog := range backlogs {
		for _, st := range setup {
			for _, burst := range []bool{false, true} {
				for _, prio := range []int{onceq.MaxPriority, 0} {
					start := "join"
					if burst {
						start = "burst"
					}
					name := fmt.Sprintf("backlog=%d/%sstart=%s/probe-priority=%d", backlog, st, start, prio)
					b.Run(name, func(b *testing.B) {
						for range b.N {
							run++
							lat := probeBehindBacklog(b, conn, fmt.Sprintf("prio-%d", run), backlog, prio, burst, st)
							pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
							b.ReportMetric(pct(0.5), "probe-start-p50-ms")
							b.ReportMetric(pct(0.99), "probe-start-p99-ms")
						}
					})
				}
			}
		}
	}
}

// backlogSetup is what the backlog's tasks carry and how long their
// handler takes; size 0: the default 100 bytes.
type backlogSetup struct {
	size    int
	handler time.Duration
	named   bool // set from the environment: named in the sub-benchmarks
}

func (s backlogSetup) String() string {
	if !s.named {
		return ""
	}
	size := s.size
	if size == 0 {
		size = 100
	}
	return fmt.Sprintf("payload=%d/handler=%v/", size, s.handler)
}

// preload writes the backlog of s.
func (s backlogSetup) preload(ctx context.Context, conn broker.Conn, queue string, n int) error {
	if s.size == 0 {
		return bench.Preload(ctx, conn, queue, n, true)
	}
	payload := make([]byte, s.size)
	rand.Read(payload) // random: it does not compress
	return bench.PreloadPayload(ctx, conn, queue, n, true, payload)
}

// probeBehindBacklog runs the worker over queue and its backlog of st,
// written before the worker starts or, burst, after, submits the probes
// of priority prio once the backlog runs, and returns their
// submit->start times, sorted.
func probeBehindBacklog(b *testing.B, conn broker.Conn, queue string, backlog, prio int, burst bool, st backlogSetup) []time.Duration {
	const probes = 100
	var ran atomic.Int64
	started := make(chan time.Duration, probes)
	h := consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		if strings.HasPrefix(t.ID, "probe-") {
			if at, err := strconv.ParseInt(string(t.Payload), 10, 64); err == nil {
				started <- time.Since(time.Unix(0, at))
			}
			return nil
		}
		ran.Add(1)
		select {
		case <-time.After(st.handler):
		case <-ctx.Done():
		}
		return nil
	})
	w, err := consumer.New(consumer.Conn(conn), consumer.Group("g-"+queue), consumer.Queues(queue),
		consumer.CheckpointDir(b.TempDir()), consumer.Concurrency(8), consumer.WithHandler(h))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	testutil.CreateTopic(b, conn, queue, 8)
	if !burst {
		if err := st.preload(ctx, conn, queue, backlog); err != nil {
			b.Fatal(err)
		}
	}
	runUntilCleanup(b, w)
	if burst {
		<-w.Started()
		if err := st.preload(ctx, conn, queue, backlog); err != nil {
			b.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ran.Load() == 0 && backlog > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the backlog did not start running within a minute")
		}
	}
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	for i := range probes {
		<-tick.C
		t := onceq.Task{ID: fmt.Sprintf("probe-%d", i), Queue: queue, Priority: prio, Payload: []byte(strconv.FormatInt(time.Now().UnixNano(), 10))}
		p.SubmitAsync(ctx, t, nil)
	}
	tick.Stop()
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, probes)
	deadline := time.After(10 * time.Minute)
	for len(lat) < probes {
		select {
		case d := <-started:
			lat = append(lat, d)
		case <-deadline:
			b.Fatalf("%d of %d probes started within 10 minutes", len(lat), probes)
		}
	}
	b.ReportMetric(float64(ran.Load()), "backlog-tasks-run-before-last-probe")
	slices.Sort(lat)
	return lat
}
