package table_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/table"
	"github.com/onceq/onceq/internal/testutil"
)

// TestFollowPartitionNotHostedYet: a table whose partition answers
// UNKNOWN_TOPIC_OR_PARTITION to the first reads of its last stable offset,
// as Kafka's leader does for a moment after another process created the
// topic, is followed all the same, and Sync waits out the same answers.
// The periodic scheduler and the control reader of a worker stopped
// there when three workers started together on three Kafka nodes.
func TestFollowPartitionNotHostedYet(t *testing.T) {
	testutil.NeedsEmbedded(t, "answers ListOffsets with an error through the cluster's control hooks")
	emb, conn := testutil.StartBroker(t, "")
	const topic = "onceq-table-test"
	var refusals atomic.Int32
	refuse := func(n int32) {
		refusals.Store(n)
		emb.Cluster().ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			emb.Cluster().KeepControl()
			req := kreq.(*kmsg.ListOffsetsRequest)
			// The reads of a last stable offset (read_committed) of the
			// table, the first n of them.
			if req.IsolationLevel != 1 || len(req.Topics) != 1 || req.Topics[0].Topic != topic || refusals.Add(-1) < 0 {
				return nil, nil, false
			}
			resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = topic
			for _, p := range req.Topics[0].Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.UnknownTopicOrPartition.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
			return resp, nil, true
		})
	}
	refuse(3)
	var (
		mu      sync.Mutex
		applied []string
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := table.Follow(ctx, conn, topic, slog.New(slog.DiscardHandler), func(r *kgo.Record) {
		mu.Lock()
		applied = append(applied, string(r.Key))
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("following a table whose partition is not hosted yet: %v", err)
	}
	defer f.Close()
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	refuse(3)
	if err := f.Sync(ctx); err != nil {
		t.Fatalf("syncing a table whose partition answers UNKNOWN_TOPIC_OR_PARTITION: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(applied) != 1 || applied[0] != "k" {
		t.Fatalf("applied %q after Sync, want [k]", applied)
	}
}
