package consumer_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// failNextTxnOffsetCommit makes the broker answer the next TxnOffsetCommit
// with UNKNOWN_SERVER_ERROR for every partition, which aborts that commit.
func failNextTxnOffsetCommit(emb *embedded.Broker, fired *atomic.Bool) {
	emb.Cluster().ControlKey(kmsg.TxnOffsetCommit.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.TxnOffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.UnknownServerError.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		fired.Store(true)
		return resp, nil, true
	})
}

// TestSlowTaskHoldsOnlyItsSlot: while one task runs, the tasks after it in
// its partition finish and their outputs are committed and visible, but
// the partition's committed offset never passes the running task (franz-go's
// session would commit the position of everything polled: a crash then
// lost the task). When the slow task finishes, the commit that carries it
// is aborted once: its result is kept and the next commit takes it, so the
// task runs once and every output appears once.
func TestSlowTaskHoldsOnlyItsSlot(t *testing.T) {
	testutil.NeedsEmbedded(t, "fails a TxnOffsetCommit through the cluster's control hooks")
	emb, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	started := make(chan struct{})
	release := make(chan struct{})
	var slowRuns atomic.Int64
	var mu sync.Mutex
	returned := map[string]time.Time{}
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if task.ID == "slow" && slowRuns.Add(1) == 1 {
			close(started)
			<-release
		}
		err := copyCounting("out").Handle(ctx, task)
		mu.Lock()
		returned[task.ID] = time.Now()
		mu.Unlock()
		return err
	})
	want := append([]string{"fast-0", "slow"}, ids(20)...)
	produceTasks(t, conn, "in", want)
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("ga"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.CommitInterval(20*time.Millisecond))
	<-started

	// Every other task's output becomes visible while "slow" runs.
	recs := waitOutputs(t, conn, "out", len(want)-1, 30*time.Second)
	seen := time.Now()
	if len(recs) != len(want)-1 {
		t.Fatalf("%d outputs visible while the slow task runs, want %d", len(recs), len(want)-1)
	}
	mu.Lock()
	var last time.Time
	for _, at := range returned {
		if at.After(last) {
			last = at
		}
	}
	mu.Unlock()
	t.Logf("the others' outputs were visible %v after the last of them returned (read_committed polling included)", seen.Sub(last).Round(time.Millisecond))
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	lags, err := adm.GroupLag(t.Context(), "ga")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lags {
		if l.Committed != 1 {
			t.Fatalf("committed offset %d while the task at offset 1 runs; want 1 (the first task done, the slow one not)", l.Committed)
		}
	}

	var fired atomic.Bool
	failNextTxnOffsetCommit(emb, &fired)
	close(release)
	waitOutputs(t, conn, "out", len(want), 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !fired.Load() {
		t.Fatal("no commit reached the injected failure")
	}
	if slowRuns.Load() != 1 {
		t.Fatalf("slow ran %d times, want 1: an aborted commit keeps its finished results", slowRuns.Load())
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), want)
	if lags, err := adm.GroupLag(t.Context(), "ga"); err != nil || len(lags) != 1 || lags[0].Committed != int64(len(want)) {
		t.Fatalf("after the slow task: lags %+v (%v); want the offset past every task, %d", lags, err, len(want))
	}
}
