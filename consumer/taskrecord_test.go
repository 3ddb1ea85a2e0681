package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// taskRecords decodes a records topic, failing on any malformed value or
// a key that is not the topic partition of the records it holds, and
// returns each ID's records in log order.
func taskRecords(t *testing.T, recs []*kgo.Record) map[string][]onceq.TaskRecord {
	t.Helper()
	byID := map[string][]onceq.TaskRecord{}
	for _, r := range recs {
		trs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil || len(trs) == 0 {
			t.Fatalf("%s/%d@%d: %d records, %v", r.Topic, r.Partition, r.Offset, len(trs), err)
		}
		for _, tr := range trs {
			if want := fmt.Sprintf("%s/%d", onceq.QueueTopic(tr.Queue), tr.Partition); string(r.Key) != want {
				t.Fatalf("record of %q from %s keyed %q", tr.ID, want, r.Key)
			}
			byID[tr.ID] = append(byID[tr.ID], tr)
		}
	}
	return byID
}

func states(rs []onceq.TaskRecord) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%s#%d", r.State, r.Attempt))
	}
	return strings.Join(s, " ")
}

// TestTaskRecordsTellEachTasksLife runs a task that fails once and then
// succeeds with a result, one that dies and one that is due later, and
// reads their records as a read_committed client would. Each record
// carries its task's priority: flaky's 5 through its retry, later's 2,
// and none (0) for doomed, which has none.
func TestTaskRecordsTellEachTasksLife(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	produceTasks(t, conn, "in", []string{"flaky"}, func(task *onceq.Task) { task.Priority = 5 })
	produceTasks(t, conn, "in", []string{"doomed"})
	produceTasks(t, conn, "in", []string{"later"}, func(task *onceq.Task) { task.Delay, task.Priority = time.Hour, 2 })
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		switch {
		case task.ID == "doomed":
			return consumer.SkipRetry(errors.New("smtp: 550 mailbox unavailable"))
		case task.Attempt == 1:
			return errors.New("transient")
		}
		if err := task.SetResult(make([]byte, consumer.DefaultMaxResultBytes+1)); !errors.Is(err, consumer.ErrResultTooLarge) {
			return consumer.SkipRetry(fmt.Errorf("SetResult of a result too large: %v", err))
		}
		return task.SetResult([]byte(`{"sent":true}`))
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gr"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.Backoff(100*time.Millisecond, 2, time.Second))
	// retrying and succeeded of flaky, dead of doomed, scheduled of later
	byID := taskRecords(t, waitRecords(t, conn, broker.RecordsTopic("in"), 4, 30*time.Second))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := states(byID["flaky"]); got != "retrying#1 succeeded#2" {
		t.Fatalf("flaky: %s, want retrying#1 succeeded#2", got)
	}
	retry, done := byID["flaky"][0], byID["flaky"][1]
	if retry.Error != "transient" || retry.Due.Before(retry.Finished.Add(100*time.Millisecond-time.Millisecond)) || retry.Started.IsZero() {
		t.Errorf("retrying record: %+v", retry)
	}
	if string(done.Result) != `{"sent":true}` || done.Queue != "in" || done.Worker == "" || done.Finished.Before(done.Started) || done.Enqueued.IsZero() {
		t.Errorf("succeeded record: %+v", done)
	}
	if got := states(byID["doomed"]); got != "dead#1" {
		t.Fatalf("doomed: %s, want dead#1", got)
	}
	if d := byID["doomed"][0]; d.Reason != "failed" || !strings.Contains(d.Error, "550 mailbox") {
		t.Errorf("dead record: %+v", d)
	}
	if got := states(byID["later"]); got != "scheduled#1" {
		t.Fatalf("later: %s, want scheduled#1", got)
	}
	for id, want := range map[string]int{"flaky": 5, "doomed": 0, "later": 2} {
		for _, r := range byID[id] {
			if r.Priority != want {
				t.Errorf("%s's %s record has priority %d, want %d", id, r.State, r.Priority, want)
			}
		}
	}
	if s := byID["later"][0]; s.Due.Before(time.Now().Add(50 * time.Minute)) {
		t.Errorf("scheduled record due %v, want an hour ahead", s.Due)
	}
}

// TestTaskRecordsOff writes no records and makes no records topic.
func TestTaskRecordsOff(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", ids(20))
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gr"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(copyCounting("out")), consumer.TaskRecords(false))
	waitOutputs(t, conn, "out", 20, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.DescribeTopic(context.Background(), broker.RecordsTopic("in")); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("records topic with task records off: %v", err)
	}
}

// TestRecordsTopicKeptAsLongAsTheWorkerNeeds: a producer's SubmitPending
// creates the records topic first, with the default 7 days; a worker
// whose result retention is 30 days then starts on the queue and raises
// the topic's retention to 30 days, so its results are kept as long as it
// promises whoever created the topic. The worker used to leave it at 7.
func TestRecordsTopicKeptAsLongAsTheWorkerNeeds(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	p := newProducer(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Tx(ctx, func(tx *producer.Tx) error {
		return tx.SubmitPending(onceq.Task{Queue: "in", ID: "pending"})
	}); err != nil {
		t.Fatal(err)
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	retention := func() string {
		t.Helper()
		info, err := adm.DescribeTopic(ctx, broker.RecordsTopic("in"))
		if err != nil {
			t.Fatal(err)
		}
		return info.Configs["retention.ms"]
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	if got := retention(); got != ms(broker.DefaultRecordsRetention) {
		t.Fatalf("records topic created by the producer: retention.ms=%s, want %s", got, ms(broker.DefaultRecordsRetention))
	}
	const month = 30 * 24 * time.Hour
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("gr"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil })),
		consumer.ResultRetention(month))
	// The producer's pending record, then the worker's succeeded one: the
	// worker has started, and ensured its topics.
	waitRecords(t, conn, broker.RecordsTopic("in"), 2, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := retention(); got != ms(month) {
		t.Fatalf("after a worker with a result retention of 30 days started: retention.ms=%s, want %s", got, ms(month))
	}
}
