package embedded_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/internal/testutil"
)

// TestKilledBrokerDeduplicatesRetries SIGKILLs the broker process after
// an idempotent producer's batch was appended, and retries that batch on
// the restarted broker, as a producer whose acknowledgment died with the
// connection does. Before the data dir recovery restored the producers'
// sequences, the broker appended the retry again: the records were in the
// log twice. Now it answers with the original offset, takes the next
// batch where it belongs and refuses a gap, as it did before the kill.
func TestKilledBrokerDeduplicatesRetries(t *testing.T) {
	dir := t.TempDir()
	bp, addr := testutil.StartBrokerProcess(t, "", dir)
	conn := broker.Conn{Brokers: []string{addr}}
	testutil.CreateTopic(t, conn, "t", 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(kversion.V3_7_0()), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	init, err := (&kmsg.InitProducerIDRequest{TransactionTimeoutMillis: -1, ProducerID: -1, ProducerEpoch: -1}).RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(init.ErrorCode)
	}
	if err != nil {
		t.Fatalf("init producer ID: %v", err)
	}
	produce := func(seq int32, vals ...string) (int64, error) {
		t.Helper()
		var recs []byte
		for i, v := range vals {
			r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
			r.Length = int32(len(r.AppendTo(nil)) - 1)
			recs = r.AppendTo(recs)
		}
		now := time.Now().UnixMilli()
		b := embedded.EncodeBatch(kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(len(vals) - 1),
			FirstTimestamp: now, MaxTimestamp: now, ProducerID: init.ProducerID, ProducerEpoch: init.ProducerEpoch,
			FirstSequence: seq, NumRecords: int32(len(vals)), Records: recs})
		req := &kmsg.ProduceRequest{Acks: -1, TimeoutMillis: 10000, Topics: []kmsg.ProduceRequestTopic{{
			Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: b}}}}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return 0, err
		}
		p := resp.Topics[0].Partitions[0]
		return p.BaseOffset, kerr.ErrorForCode(p.ErrorCode)
	}
	mustAt := func(what string, want int64, seq int32, vals ...string) {
		t.Helper()
		if off, err := produce(seq, vals...); err != nil || off != want {
			t.Fatalf("%s: offset %d, %v; want offset %d", what, off, err, want)
		}
	}
	mustAt("first batch", 0, 0, "a", "b")
	mustAt("second batch", 2, 2, "c")

	bp.Kill()
	bp, _ = testutil.StartBrokerProcess(t, addr, dir)
	if out := bp.Output(); !strings.Contains(out, "sequences_restored=1") {
		t.Errorf("the restarted broker should report one producer's sequences restored; it printed:\n%s", out)
	}
	mustAt("the retry of the second batch after the kill", 2, 2, "c")
	mustAt("the next batch", 3, 3, "d")
	if _, err := produce(9, "gap"); err != kerr.OutOfOrderSequenceNumber {
		t.Errorf("a batch past a gap in the sequence: %v, want %v", err, kerr.OutOfOrderSequenceNumber)
	}
	if got, want := committedValues(t, conn), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("the log holds %q, want %q", got, want)
	}
}
