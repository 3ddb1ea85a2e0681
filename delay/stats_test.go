package delay_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
)

// TestStatsCountsTasksNotOffsets pins issue 17's "delay stats counts
// transaction markers as waiting tasks": three tasks written in three
// transactions and two in an aborted one take nine offsets of a bucket
// partition, and three tasks wait.
func TestStatsCountsTasksNotOffsets(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	p := delay.DefaultPlanner()
	bucket := p.Topics()[len(p.Topics())-1] // 1d: nothing moves during the test
	testutil.CreateTopic(t, conn, bucket, 1)
	cl, err := conn.NewClient(kgo.TransactionalID("stats-test"), kgo.DefaultProduceTopic(bucket))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	due := time.Now().Add(30 * time.Hour)
	write := func(commit bool, ids ...string) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			task := onceq.Task{ID: id, Queue: "q", Due: due}
			if err := cl.ProduceSync(ctx, task.Record(bucket)).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	write(true, "a")
	write(true, "b")
	write(false, "aborted-1", "aborted-2")
	write(true, "c")

	st, err := delay.Stats(ctx, conn, p, delay.DefaultGroup)
	if err != nil {
		t.Fatal(err)
	}
	last := st[len(st)-1]
	if last.Topic != bucket || last.Waiting != 3 || !last.Exact {
		t.Fatalf("%s: %+v, want 3 waiting, exact", bucket, last)
	}
	for _, b := range st[:len(st)-1] {
		if b.Waiting != 0 || !b.Exact {
			t.Fatalf("%s: %+v, want nothing waiting", b.Topic, b)
		}
	}
}

// TestStatsSamplesLongBacklogs: past StatsSampleOffsets a partition's
// count is estimated from the records read, and says so.
func TestStatsSamplesLongBacklogs(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	p := delay.DefaultPlanner()
	bucket := p.Topics()[len(p.Topics())-1]
	testutil.CreateTopic(t, conn, bucket, 1)
	cl, err := conn.NewClient(kgo.DefaultProduceTopic(bucket))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 3 * delay.StatsSampleOffsets
	due := time.Now().Add(30 * time.Hour)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		task := onceq.Task{ID: "t" + strconv.Itoa(i), Queue: "q", Due: due}
		recs[i] = task.Record(bucket)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st, err := delay.Stats(context.Background(), conn, p, delay.DefaultGroup)
	if err != nil {
		t.Fatal(err)
	}
	if last := st[len(st)-1]; last.Waiting != int64(n) || last.Exact {
		t.Fatalf("%+v, want %d waiting, estimated", last, n)
	}
	// A canceled context is an error only before anything is asked.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := delay.Stats(ctx, conn, p, delay.DefaultGroup); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// TestServiceStatsGauge: the service's onceq_delayed_tasks follows its
// buckets from one refresh to the next, through one client: a task
// written to the longest bucket shows, then a second.
func TestServiceStatsGauge(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	p := delay.DefaultPlanner()
	bucket := p.Topics()[len(p.Topics())-1] // 1d: nothing moves during the test
	testutil.CreateTopic(t, conn, bucket, 1)
	reg := prometheus.NewRegistry()
	runService(t, delay.Conn(conn), delay.Logger(testLogger()), delay.Registerer(reg), delay.StatsInterval(100*time.Millisecond))
	cl, err := conn.NewClient(kgo.DefaultProduceTopic(bucket))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	waiting := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "onceq_delayed_tasks" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "bucket" && l.GetValue() == "1d" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return -1
	}
	for i, want := range []float64{1, 2} {
		task := onceq.Task{ID: strconv.Itoa(i), Queue: "q", Due: time.Now().Add(30 * time.Hour)}
		if err := cl.ProduceSync(context.Background(), task.Record(bucket)).FirstErr(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for got := waiting(); got != want; got = waiting() {
			if time.Now().After(deadline) {
				t.Fatalf("onceq_delayed_tasks of the 1d bucket is %v after 30s, want %v", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
