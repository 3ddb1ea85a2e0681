package consumer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// failNextTxnOffsetCommit makes the broker answer the next TxnOffsetCommit
// with UNKNOWN_SERVER_ERROR for every partition, which aborts that commit.
func failNextTxnOffsetCommit(emb *broker.Embedded, fired *atomic.Bool) {
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

// TestNoCommitPastAnInFlightTask pins a lost-task bug: franz-go turns
// marked commits off for transactional clients, so the transaction
// committed the position of everything polled, including a task still
// running; a crash or an aborted commit after that lost the task. The
// commit barrier now waits for every polled task. While one task runs,
// nothing is committed; an aborted commit afterwards runs everything again,
// and every task ends up in the output exactly once.
func TestNoCommitPastAnInFlightTask(t *testing.T) {
	emb, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	started := make(chan struct{})
	release := make(chan struct{})
	var slowRuns atomic.Int64
	h := consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
		if task.ID == "slow" && slowRuns.Add(1) == 1 {
			close(started)
			<-release
		}
		return copyCounting("out").Handle(ctx, task)
	})
	want := append([]string{"fast-0", "slow"}, ids(20)...)
	produceTasks(t, conn, "in", want)
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("ga"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.CommitInterval(20*time.Millisecond))
	<-started
	time.Sleep(time.Second) // fifty commit intervals
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if lags, err := adm.GroupLag(t.Context(), "ga"); err == nil {
		for _, l := range lags {
			if l.Committed > 1 {
				t.Fatalf("offset %d committed while the task at offset 1 runs", l.Committed)
			}
		}
	}
	if recs := testutil.ReadCommitted(t, conn, 10*time.Second, "out"); len(recs) != 0 {
		t.Fatalf("%d outputs committed while a polled task runs", len(recs))
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
	if slowRuns.Load() != 2 {
		t.Fatalf("slow ran %d times, want 2 (its first result was aborted)", slowRuns.Load())
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 10*time.Second, "out"), want)
}
