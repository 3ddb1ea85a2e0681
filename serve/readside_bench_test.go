package serve_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/onceq/onceq/control"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve"
)

// BenchmarkReadSide measures the read side over many queues (N from
// ONCEQ_BENCH_QUEUES, default 10,000) on the embedded broker: N queues
// of namespace shop, each with its task records and dead-letter topics,
// a consumer group with offsets on every one of them, and one queue,
// shop.q-00000, whose worker ran 100 tasks (10 of them dead letters),
// and whose records hold N more tasks of every state (N from
// ONCEQ_BENCH_RETAINED, default 1,000,000; writeRetained). Each
// sub-benchmark is one operation, in ms/op:
//
//	queue-list    what onceq queue list does: a new inspector, every
//	              queue with its tasks by state
//	stats         a queue's statistics (onceq queue stats Q, GET .../stats)
//	pause-resume  a pause and a resume of a queue
//	task-get      a new inspector, one task: onceq task get Q ID
//	              with --view-cache off
//	task-get-cached the same with a view kept in a directory: onceq
//	              task get's default, after a first command
//	dlq-size      a queue's dead letters counted
//	dlq-stats     onceq dlq stats: every queue's dead letters by reason
//	api-queues    GET /api/shop, the namespace's queues
//	console-home  the console's queue list, its first page
//	console-queue the console's page of shop.q-00000
//	console-due   its tasks due soonest
//	console-task  a task's page, with its attempts
//	console-running its running tasks, with their workers
//	console-dead  its dead tasks, newest first
//	console-groups the groups page, lag counted in tasks
//	console-workflows the latest workflows
//
// Run it with make bench-read.
func BenchmarkReadSide(b *testing.B) {
	n := benchQueues(b)
	a := start(b, serve.Scheduler(false), serve.DelayService(false))
	ctx := context.Background()
	queues := make([]string, n)
	specs := make([]broker.TopicSpec, 0, 3*n)
	offsets := kadm.Offsets{}
	for i := range queues {
		q := fmt.Sprintf("shop.q-%05d", i)
		queues[i] = q
		for _, t := range []string{q, broker.RecordsTopic(q), broker.DLQTopic(q)} {
			specs = append(specs, broker.TopicSpec{Name: t, Partitions: 1})
		}
		offsets.Add(kadm.Offset{Topic: q, Partition: 0, At: 0, LeaderEpoch: -1})
	}
	adm, err := broker.NewAdmin(a.conn)
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	setup := time.Now()
	if _, err := adm.EnsureTopics(ctx, specs); err != nil {
		b.Fatal(err)
	}
	if err := adm.Kadm().CommitAllOffsets(ctx, "workers", offsets); err != nil {
		b.Fatal(err)
	}
	busy := queues[0]
	runTasks(b, a, busy)
	retained := benchRetained(b)
	counts := writeRetained(b, a.conn, busy, retained)
	b.Logf("%d queues and %d retained tasks set up in %v", n, retained, time.Since(setup).Round(time.Millisecond))

	tok := a.token("shop", false)
	in, err := inspect.Open(inspect.Conn(a.conn))
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	loading := time.Now()
	awaitRetained(b, in, busy, int64(retained+100))
	b.Logf("a new view loaded %s's %d tasks in %v; its counts: %v", busy, retained+100, time.Since(loading).Round(time.Millisecond), counts)
	r, err := dlq.NewReader(a.conn)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()

	// The server's view of busy, loaded as a first look at its page
	// loads it.
	loading = time.Now()
	if err := getPage(a, tok, "/console/q/"+busy); err != nil {
		b.Fatal(err)
	}
	b.Logf("the server's view loaded %s in %v", busy, time.Since(loading).Round(time.Millisecond))
	op := func(name string, fn func() error) { benchOp(b, name, fn) }
	op("queue-list", func() error {
		in, err := inspect.Open(inspect.Conn(a.conn))
		if err != nil {
			return err
		}
		defer in.Close()
		qs, err := in.Queues(ctx)
		if err != nil {
			return err
		}
		if _, err := in.CountsOf(ctx, qs); err != nil {
			return err
		}
		if len(qs) != n {
			return fmt.Errorf("%d queues listed, want %d", len(qs), n)
		}
		return nil
	})
	op("stats", func() error {
		st, err := in.Stats(ctx, busy)
		if err == nil && len(st.Groups) == 0 {
			err = fmt.Errorf("stats of %s: no group", busy)
		}
		return err
	})
	op("pause-resume", func() error {
		ctl := control.New(in)
		if err := ctl.Pause(ctx, busy); err != nil {
			return err
		}
		return ctl.Resume(ctx, busy)
	})
	op("task-get", func() error {
		in, err := inspect.Open(inspect.Conn(a.conn))
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = in.Get(ctx, busy, "t-42")
		return err
	})
	// What the CLI does with its view cache: the first command reads the
	// records (here, before the clock), the next ones only what is new.
	cached := b.TempDir()
	getCached := func() error {
		in, err := inspect.Open(inspect.Conn(a.conn), inspect.Dir(cached))
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = in.Get(ctx, busy, "t-42")
		return err
	}
	if err := getCached(); err != nil {
		b.Fatal(err)
	}
	op("task-get-cached", getCached)
	op("dlq-size", func() error {
		got := 0
		err := r.Read(ctx, busy, func(dlq.Letter) error { got++; return nil })
		if err == nil && got != 10 {
			err = fmt.Errorf("%d dead letters, want 10", got)
		}
		return err
	})
	op("dlq-stats", func() error {
		st, err := r.QueueStats(ctx)
		if err == nil && len(st) != n {
			err = fmt.Errorf("dead letters of %d queues, want %d", len(st), n)
		}
		return err
	})
	get := func(path string) error { return getPage(a, tok, path) }
	op("api-queues", func() error { return get("/api/shop") })
	op("console-home", func() error { return get("/console/") })
	op("console-queue", func() error { return get("/console/q/" + busy) })
	op("console-due", func() error { return get("/console/q/" + busy + "?state=due") })
	op("console-task", func() error { return get("/console/q/" + busy + "/task/t-42") })
	op("console-running", func() error { return get("/console/q/" + busy + "?state=running") })
	op("console-dead", func() error { return get("/console/q/" + busy + "?state=dead") })
	op("console-groups", func() error { return get("/console/groups") })
	op("console-workflows", func() error { return get("/console/workflow") })
}

// benchQueues is the number of queues ONCEQ_BENCH_QUEUES asks for, or
// 10,000.
func benchQueues(b *testing.B) int {
	v := os.Getenv("ONCEQ_BENCH_QUEUES")
	if v == "" {
		return 10_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("ONCEQ_BENCH_QUEUES=%q: want a number of queues", v)
	}
	return n
}

// benchOp runs fn as the sub-benchmark name, in ms/op.
func benchOp(b *testing.B, name string, fn func() error) {
	b.Run(name, func(b *testing.B) {
		start := time.Now()
		for b.Loop() {
			if err := fn(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/op")
	})
}

// getPage gets path with tok (as a console's basic auth and an API's
// X-Token), and fails unless it answers 200.
func getPage(a *api, tok, path string) error {
	req, err := http.NewRequest("GET", a.url+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth("", tok)
	req.Header.Set("X-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("GET %s: %d %.300s", path, resp.StatusCode, body)
	}
	return err
}

// BenchmarkReadSideLanes measures the read side over the lane queues of
// one lane (N from ONCEQ_BENCH_QUEUES, default 10,000): lane fn of 4
// partitions, one pending task in each of fn/q-00000 to fn/q-<N-1>, and
// a consumer group whose offsets are at the lane's start, so that every
// task waits for it. Each sub-benchmark is one operation, in ms/op:
//
//	lane-list     a new inspector, the lane's queues listed
//	stats         a lane queue's statistics (its waiting tasks counted
//	              from the lane's records past the group's offsets, an
//	              estimate past delay.StatsSampleOffsets a partition)
//	pause-resume  a pause and a resume of a lane queue
//	console-lane  the console's first page of the lane's queues
//	console-queue the console's page of fn/q-00000
//
// Run it with make bench-read.
func BenchmarkReadSideLanes(b *testing.B) {
	n := benchQueues(b)
	a := start(b, serve.Scheduler(false), serve.DelayService(false))
	ctx := context.Background()
	adm, err := broker.NewAdmin(a.conn)
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.EnsureTopics(ctx, []broker.TopicSpec{{Name: "fn", Partitions: 4}}); err != nil {
		b.Fatal(err)
	}
	p, err := producer.New(producer.Conn(a.conn))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	setup := time.Now()
	for from := 0; from < n; from += 1000 {
		err := p.Tx(ctx, func(tx *producer.Tx) error {
			for i := from; i < min(from+1000, n); i++ {
				if err := tx.SubmitPending(onceq.Task{Queue: fmt.Sprintf("fn/q-%05d", i), ID: "t", Payload: []byte("x")}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	offsets := kadm.Offsets{}
	for part := range int32(4) {
		offsets.Add(kadm.Offset{Topic: "fn", Partition: part, At: 0, LeaderEpoch: -1})
	}
	if err := adm.Kadm().CommitAllOffsets(ctx, "workers", offsets); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d lane queues set up in %v", n, time.Since(setup).Round(time.Millisecond))
	in, err := inspect.Open(inspect.Conn(a.conn))
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	busy := "fn/q-00000"
	tok := a.token("*", false)
	benchOp(b, "lane-list", func() error {
		in, err := inspect.Open(inspect.Conn(a.conn))
		if err != nil {
			return err
		}
		defer in.Close()
		qs, err := in.LaneQueues(ctx, "fn")
		if err == nil && len(qs) != n {
			err = fmt.Errorf("%d lane queues listed, want %d", len(qs), n)
		}
		return err
	})
	benchOp(b, "stats", func() error {
		st, err := in.Stats(ctx, busy)
		// Past delay.StatsSampleOffsets records a partition, the count
		// is an estimate from the first ones (Exact false).
		if err == nil && (len(st.Groups) != 1 || st.Groups[0].Exact && st.Groups[0].Waiting != 1) {
			err = fmt.Errorf("stats of %s: groups %+v, want 1 task waiting for workers", busy, st.Groups)
		}
		return err
	})
	benchOp(b, "pause-resume", func() error {
		ctl := control.New(in)
		if err := ctl.Pause(ctx, busy); err != nil {
			return err
		}
		return ctl.Resume(ctx, busy)
	})
	benchOp(b, "console-lane", func() error { return getPage(a, tok, "/console/?filter=fn/") })
	benchOp(b, "console-queue", func() error { return getPage(a, tok, "/console/q/fn%2Fq-00000") })
}

// runTasks runs 100 tasks t-0 to t-99 of queue on a worker, every tenth
// to a dead letter, and returns once each has its final record.
func runTasks(b *testing.B, a *api, queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := consumer.New(consumer.Conn(a.conn), consumer.Queues(queue), consumer.CheckpointDir(b.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			if string(t.Payload) == "fail" {
				return consumer.SkipRetry(errors.New("refused"))
			}
			return t.SetResult([]byte("ok"))
		})))
	if err != nil {
		b.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		<-done
	}()
	p, err := producer.New(producer.Conn(a.conn))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for i := range 100 {
		payload := "ok"
		if i%10 == 0 {
			payload = "fail"
		}
		if _, err := p.Submit(ctx, onceq.Task{Queue: queue, ID: "t-" + strconv.Itoa(i), Payload: []byte(payload)}); err != nil {
			b.Fatal(err)
		}
	}
	in, err := inspect.Open(inspect.Conn(a.conn))
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	for i := range 100 {
		if _, err := in.Wait(ctx, queue, "t-"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
}
