package inspect_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// BenchmarkView writes a records topic of N succeeded tasks (8 partitions,
// batches of 2,000 as workers write them), then times the restore of a
// view kept in a directory (the first query loads the queue), Get of
// random IDs on the loaded view (p50, p99), the view's bytes on disk per
// task, and its reopening from the directory (counts read back from its
// index). ONCEQ_BENCH_VIEW_PENDING=1 writes pending tasks of priorities
// 0-9 instead, whose reopening reads each one's record for its priority.
// Run:
//
//	go test ./inspect -run '^$' -bench View -benchtime 1x
func BenchmarkView(b *testing.B) {
	n := bench.EnvTasks()
	state := onceq.StateSucceeded
	if os.Getenv("ONCEQ_BENCH_VIEW_PENDING") == "1" {
		state = onceq.StatePending
	}
	_, conn := testutil.StartBroker(b, "")
	testutil.CreateTopic(b, conn, broker.RecordsTopic("q"), 8)
	cl, err := conn.NewClient(kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1<<16))
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	const batch = 2000
	for i := 0; i < n; i += batch {
		var value []byte
		for j := i; j < min(i+batch, n); j++ {
			r := onceq.TaskRecord{ID: fmt.Sprintf("0190b6e4-7d2a-7cc1-9a3e-%012x", j), Queue: "q", State: onceq.StateSucceeded, Attempt: 1,
				Enqueued: at, Started: at, Finished: at, Worker: "onceq-3f2a9c1b", Partition: int32(j % 8), Offset: int64(j), Result: []byte(`{"ok":true}`)}
			if state == onceq.StatePending {
				r = onceq.TaskRecord{ID: r.ID, Queue: "q", State: state, Enqueued: at, Priority: j % 10}
			}
			value = append(r.AppendJSON(value), '\n')
		}
		cl.Produce(context.Background(), &kgo.Record{Topic: broker.RecordsTopic("q"), Key: []byte("q/" + strconv.Itoa(i/batch%8)), Value: value}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	for b.Loop() {
		dir := b.TempDir()
		in, err := inspect.Open(inspect.Conn(conn), inspect.Dir(dir))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		start := time.Now()
		counts, err := in.Counts(ctx, "q")
		restore := time.Since(start)
		if err != nil || counts[state] != int64(n) {
			b.Fatalf("restored %v, %v; want %d %s", counts, err, n, state)
		}
		lat := make([]time.Duration, 0, 10_000)
		for range 10_000 {
			id := fmt.Sprintf("0190b6e4-7d2a-7cc1-9a3e-%012x", rand.IntN(n))
			t0 := time.Now()
			if _, err := in.Get(ctx, "q", id); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		if err := in.Close(); err != nil {
			b.Fatal(err)
		}
		in, err = inspect.Open(inspect.Conn(conn), inspect.Dir(dir))
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		st, err := in.Stats(ctx, "q")
		reopen := time.Since(start)
		if err != nil || st.Tasks[state] != int64(n) {
			b.Fatalf("reopened %v, %v; want %d %s", st.Tasks, err, n, state)
		}
		if err := in.Close(); err != nil {
			b.Fatal(err)
		}
		slices.Sort(lat)
		b.ReportMetric(reopen.Seconds(), "reopen-s")
		b.ReportMetric(restore.Seconds(), "restore-s")
		b.ReportMetric(float64(n)/restore.Seconds(), "restored-tasks/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "get-p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "get-p99-ms")
		b.ReportMetric(float64(testutil.DirSize(b, dir))/float64(n), "disk-B/task")
	}
}

// BenchmarkWait runs an exactly-once worker (noop handler that sets a
// result) on 10,000 tasks submitted at 2,000 a second, waits for each
// with Wait, and reports the time from the commit that finished a task
// (the worker's CommitHook after the Kafka transaction) to Wait's return:
// p50, p99 and max. Run:
//
//	go test ./inspect -run '^$' -bench Wait -benchtime 1x
func BenchmarkWait(b *testing.B) {
	const tasks, rate = 10_000, 2_000
	_, conn := testutil.StartBroker(b, "")
	testutil.CreateTopic(b, conn, "w", 8)
	for i := 0; b.Loop(); i++ {
		var mu sync.Mutex
		var commits []time.Time // after each Kafka commit
		ended := map[string]time.Time{}
		h := consumer.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			mu.Lock()
			ended[t.ID] = time.Now()
			mu.Unlock()
			return t.SetResult([]byte("ok"))
		})
		hook := func(p consumer.CommitPoint) {
			if p == consumer.BetweenCommits {
				mu.Lock()
				commits = append(commits, time.Now())
				mu.Unlock()
			}
		}
		w, err := consumer.New(consumer.Conn(conn), consumer.Group(fmt.Sprintf("w-%d", i)), consumer.Queues("w"),
			consumer.CheckpointDir(b.TempDir()), consumer.WithHandler(h), consumer.CommitHook(hook))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		in, err := inspect.Open(inspect.Conn(conn))
		if err != nil {
			b.Fatal(err)
		}
		// The worker makes the records topic as it starts: the view of
		// the queue loads once it exists (the measure is of a running
		// system, not of its start).
		for {
			if _, err := in.Counts(ctx, "w"); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		p, err := producer.New(producer.Conn(conn))
		if err != nil {
			b.Fatal(err)
		}
		returned := make([]time.Time, tasks)
		var wg sync.WaitGroup
		tick := time.NewTicker(10 * time.Millisecond)
		for sent := 0; sent < tasks; {
			<-tick.C
			for j := 0; j < rate/100 && sent < tasks; j++ {
				id := fmt.Sprintf("wait-%d-%d", i, sent)
				if _, err := p.Submit(ctx, onceq.Task{Queue: "w", ID: id}); err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func(k int) {
					defer wg.Done()
					wctx, wcancel := context.WithTimeout(ctx, time.Minute)
					defer wcancel()
					if _, err := in.Wait(wctx, "w", id); err != nil {
						b.Error(err)
					}
					returned[k] = time.Now()
				}(sent)
				sent++
			}
		}
		tick.Stop()
		wg.Wait()
		p.Close()
		in.Close()
		cancel()
		<-done
		var lat []time.Duration
		for k := range tasks {
			end := ended[fmt.Sprintf("wait-%d-%d", i, k)]
			j, _ := slices.BinarySearchFunc(commits, end, func(c, e time.Time) int { return c.Compare(e) })
			if j == len(commits) {
				b.Fatalf("task %d ended after the last commit", k)
			}
			lat = append(lat, max(returned[k].Sub(commits[j]), 0))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "wait-p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "wait-p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "wait-max-ms")
	}
}
