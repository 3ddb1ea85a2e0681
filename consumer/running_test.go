package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestRunningRecorded: a run past RecordRunningAfter is recorded running,
// once, with its worker, start, attempt and source, in a commit of its
// own while nothing else finishes; its outcome's record follows it in the
// same records partition. A run that awaits its start (Task.AwaitsStart)
// is recorded running only from its WorkStarts. A quick run is never
// recorded running, and a worker with RecordRunningAfter(0) records no
// run in progress.
func TestRunningRecorded(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "slow", 1)
	testutil.CreateTopic(t, conn, "unnoted", 1)
	release, take := make(chan struct{}), make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		switch t.ID {
		case "quick":
			return nil
		case "held":
			t.AwaitsStart()
			select {
			case <-take:
				t.WorkStarts()
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	runWorker(t, consumer.Conn(conn), consumer.Queues("slow"), consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(h),
		consumer.RecordRunningAfter(200*time.Millisecond))
	runWorker(t, consumer.Conn(conn), consumer.Group("unnoted"), consumer.Queues("unnoted"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.RecordRunningAfter(0))
	submitted := time.Now()
	produceTasks(t, conn, "slow", []string{"quick", "long", "held"})
	produceTasks(t, conn, "unnoted", []string{"long"})

	lines := func(topic string) []onceq.TaskRecord {
		var out []onceq.TaskRecord
		for _, r := range readRecords(t, conn, topic) {
			trs, err := onceq.DecodeTaskRecords(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, trs...)
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	// runningOf waits for id's running record.
	runningOf := func(id string) onceq.TaskRecord {
		t.Helper()
		for {
			for _, tr := range lines(broker.RecordsTopic("slow")) {
				if tr.ID == id && tr.State == onceq.StateRunning {
					return tr
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no running record of %s after 30s: %+v", id, lines(broker.RecordsTopic("slow")))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	running := runningOf("long")
	if running.Worker == "" || running.Attempt != 1 || running.Queue != "slow" || running.Partition != 0 || running.Offset != 1 ||
		running.Started.Before(submitted.Add(-time.Second)) || !running.Finished.IsZero() {
		t.Errorf("running record %+v; want attempt 1 of slow/0@1 by its worker, started after its submission, not finished", running)
	}
	// held has waited as long, for its work to start: not running yet.
	if hasState(lines(broker.RecordsTopic("slow")), "held", onceq.StateRunning) {
		t.Fatal("a run that awaits its start was recorded running")
	}
	took := time.Now()
	close(take)
	held := runningOf("held")
	if held.Started.Before(took.Truncate(time.Millisecond)) {
		t.Errorf("held's running record starts %v, before its work started at %v", held.Started, took)
	}
	close(release)
	for _, topic := range []string{"slow", "unnoted"} {
		for time.Now().Before(deadline) && !hasState(lines(broker.RecordsTopic(topic)), "long", onceq.StateSucceeded) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	var states []onceq.TaskState
	for _, tr := range lines(broker.RecordsTopic("slow")) {
		switch {
		case tr.ID == "quick" && tr.State == onceq.StateRunning:
			t.Errorf("the quick run was recorded running: %+v", tr)
		case tr.ID == "long":
			states = append(states, tr.State)
		}
	}
	if len(states) != 2 || states[0] != onceq.StateRunning || states[1] != onceq.StateSucceeded {
		t.Errorf("the long run's records, in order: %v; want [running succeeded]", states)
	}
	var unnoted []onceq.TaskState
	for _, tr := range lines(broker.RecordsTopic("unnoted")) {
		unnoted = append(unnoted, tr.State)
	}
	if len(unnoted) != 1 || unnoted[0] != onceq.StateSucceeded {
		t.Errorf("with RecordRunningAfter(0), the long run's records: %v; want [succeeded]", unnoted)
	}
}

// readRecords reads topic's committed records.
func readRecords(t *testing.T, conn broker.Conn, topic string) []*kgo.Record {
	t.Helper()
	recs, err := testutil.ReadCommittedErr(conn, 30*time.Second, topic)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func hasState(trs []onceq.TaskRecord, id string, st onceq.TaskState) bool {
	for _, tr := range trs {
		if tr.ID == id && tr.State == st {
			return true
		}
	}
	return false
}

// TestManyRunningRecorded: the running records of many runs of one
// partition are split into Kafka records within the batch limit (half
// of MaxMessageBytes), so that the commit that writes them is not
// refused as too large: each run is recorded running once.
func TestManyRunningRecorded(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "many", 1)
	release := make(chan struct{})
	h := consumer.HandlerFunc(func(ctx context.Context, _ *consumer.Task) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	const n, maxMessage = 40, 8192
	runWorker(t, consumer.Conn(conn), consumer.Queues("many"), consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(h),
		consumer.Concurrency(n), consumer.MaxMessageBytes(maxMessage), consumer.MaxResultBytes(1024),
		consumer.RecordRunningAfter(100*time.Millisecond))
	defer close(release)
	produceTasks(t, conn, "many", ids(n))
	deadline := time.Now().Add(30 * time.Second)
	for {
		running, values := map[string]int{}, 0
		for _, r := range readRecords(t, conn, broker.RecordsTopic("many")) {
			trs, err := onceq.DecodeTaskRecords(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			values++
			if len(r.Value) > maxMessage/2 {
				t.Fatalf("a Kafka record of %d bytes of task records; want at most %d", len(r.Value), maxMessage/2)
			}
			for _, tr := range trs {
				if tr.State == onceq.StateRunning {
					running[tr.ID]++
				}
			}
		}
		if len(running) == n {
			for id, c := range running {
				if c != 1 {
					t.Errorf("%s recorded running %d times; want once", id, c)
				}
			}
			if values < 2 {
				t.Errorf("%d running records in %d Kafka record; want them split", n, values)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs recorded running after 30s", len(running), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
