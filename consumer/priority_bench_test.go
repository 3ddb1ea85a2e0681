package consumer_test

import (
	"context"
	"fmt"
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
// (PriorityLookahead). Run:
//
//	go test ./consumer -run '^$' -bench BenchmarkPriority -benchtime 1x
func BenchmarkPriority(b *testing.B) {
	backlogs := testutil.EnvCounts(b, "ONCEQ_BENCH_PRIORITY_BACKLOGS", []int{20_000, 100_000}, 0, 10_000_000)
	_, conn := testutil.StartBroker(b, "")
	run := 0
	for _, backlog := range backlogs {
		for _, burst := range []bool{false, true} {
			for _, prio := range []int{onceq.MaxPriority, 0} {
				name := fmt.Sprintf("backlog=%d/start=join/probe-priority=%d", backlog, prio)
				if burst {
					name = fmt.Sprintf("backlog=%d/start=burst/probe-priority=%d", backlog, prio)
				}
				b.Run(name, func(b *testing.B) {
					for range b.N {
						run++
						lat := probeBehindBacklog(b, conn, fmt.Sprintf("prio-%d", run), backlog, prio, burst)
						pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
						b.ReportMetric(pct(0.5), "probe-start-p50-ms")
						b.ReportMetric(pct(0.99), "probe-start-p99-ms")
					}
				})
			}
		}
	}
}

// probeBehindBacklog runs the worker over queue and its backlog, written
// before the worker starts or, burst, after, submits the probes of
// priority prio once the backlog runs, and returns their submit->start
// times, sorted.
func probeBehindBacklog(b *testing.B, conn broker.Conn, queue string, backlog, prio int, burst bool) []time.Duration {
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
		case <-time.After(time.Millisecond):
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
		if err := bench.Preload(ctx, conn, queue, backlog, true); err != nil {
			b.Fatal(err)
		}
	}
	runUntilCleanup(b, w)
	if burst {
		<-w.Started()
		if err := bench.Preload(ctx, conn, queue, backlog, true); err != nil {
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
