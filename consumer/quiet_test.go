package consumer_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestQuietPartitionsWake: a worker stops fetching the partitions it has
// heard nothing from for QuietAfter, and starts their tasks all the same
// when they come: woken by the producer's wake-up (of Submit, and of Tx
// at its commit), by the wake-up its own commit writes for a task a
// handler emitted, and, for a record written by
// kcat (no wake-up at all), by its look at the partitions' offsets. The
// look wakes nothing until the kcat part, so the wake-ups are what the
// first parts see.
func TestQuietPartitionsWake(t *testing.T) {
	kcat := testutil.Kcat(t)
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "qa", 2)
	testutil.CreateTopic(t, conn, "qb", 1)
	reg := prometheus.NewRegistry()
	ran := make(chan string, 16)
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues("qa", "qb"), consumer.CheckpointDir(t.TempDir()),
		consumer.Registerer(reg), consumer.QuietAfter(500*time.Millisecond),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			ran <- task.ID
			if string(task.Payload) == "emit" {
				return task.Emit(onceq.Task{ID: task.ID + "-out", Queue: "qb"})
			}
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	consumer.SetScanWakes(w, false)
	runUntilCleanup(t, w)
	ctx := t.Context()
	quiet := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			got := metricValue(t, reg, "onceq_quiet_partitions")
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("onceq_quiet_partitions is %v after a minute, want %v", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait := func(ids ...string) {
		t.Helper()
		want := map[string]bool{}
		for _, id := range ids {
			want[id] = true
		}
		timeout := time.After(time.Minute)
		for len(want) > 0 {
			select {
			case id := <-ran:
				delete(want, id)
			case <-timeout:
				t.Fatalf("tasks %v never ran", want)
			}
		}
	}
	quiet(3)

	p := newProducer(t, conn)
	if _, err := p.Submit(ctx, onceq.Task{ID: "p1", Queue: "qa"}); err != nil {
		t.Fatal(err)
	}
	wait("p1")
	quiet(3)

	if _, err := p.Submit(ctx, onceq.Task{ID: "e1", Queue: "qa", Payload: []byte("emit")}); err != nil {
		t.Fatal(err)
	}
	wait("e1", "e1-out")
	quiet(3)

	if err := p.Tx(ctx, func(tx *producer.Tx) error { return tx.Submit(onceq.Task{ID: "t1", Queue: "qb"}) }); err != nil {
		t.Fatal(err)
	}
	wait("t1")
	quiet(3)

	consumer.SetScanWakes(w, true)
	cmd := exec.Command(kcat, "-b", conn.Brokers[0], "-P", "-t", "qb", "-K", ":", "-H", onceq.HeaderID+"=k1")
	cmd.Stdin = strings.NewReader("k1:from kcat\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	wait("k1")
}

// TestFetchesWhileACommitIsDue: a task finished and not yet committed
// does not hold up the next one. With an hour between commits, a task
// written after the first one finished starts before any commit (the
// worker's poll once returned at once, again and again, until the commit
// was due, reading nothing meanwhile).
func TestFetchesWhileACommitIsDue(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	started := make(chan string, 2)
	h := consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
		started <- task.ID
		return nil
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("poll"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.CommitInterval(time.Hour))
	for _, id := range []string{"a", "b"} {
		produceTasks(t, conn, "in", []string{id})
		select {
		case got := <-started:
			if got != id {
				t.Fatalf("task %s started, want %s", got, id)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("task %s did not start within 30 s; the task before it finished and waits for its commit", id)
		}
	}
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offsets, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "poll")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offsets.Lookup("in", 0); ok && o.At >= 0 {
		t.Fatalf("the group committed offset %d before the second task started: the test shows nothing", o.At)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
