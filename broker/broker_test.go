package broker_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/internal/testutil"
)

func TestAdminTopics(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx := context.Background()
	if err := adm.CreateTopic(ctx, "jobs", 3, map[string]string{"retention.ms": "3600000"}); err != nil {
		t.Fatal(err)
	}
	if err := adm.CreateTopic(ctx, "jobs", 3, nil); err == nil {
		t.Fatal("creating an existing topic succeeded")
	}
	if err := adm.EnsureTopic(ctx, "jobs", 3, nil); err != nil {
		t.Fatalf("EnsureTopic on an existing topic: %v", err)
	}
	if err := adm.EnsureTopic(ctx, broker.DelayTopic(time.Second), 2, nil); err != nil {
		t.Fatal(err)
	}
	names, err := adm.ListTopics(ctx, false)
	if err != nil || len(names) != 1 || names[0] != "jobs" {
		t.Fatalf("ListTopics without internal: %v %v", names, err)
	}
	names, _ = adm.ListTopics(ctx, true)
	if len(names) != 2 {
		t.Fatalf("ListTopics with internal: %v", names)
	}
	info, err := adm.DescribeTopic(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Partitions) != 3 || info.Configs["retention.ms"] != "3600000" {
		t.Fatalf("describe: %+v", info)
	}
	if _, err := adm.DescribeTopic(ctx, "missing"); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("describe missing: %v", err)
	}
	if err := adm.DeleteTopic(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	if err := adm.DeleteTopic(ctx, "jobs"); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
}

func TestGroupLag(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "lagq", 2)
	cl, err := conn.NewClient(kgo.DefaultProduceTopic("lagq"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm, _ := broker.NewAdmin(conn)
	defer adm.Close()
	if _, err := adm.Kadm().CommitOffsets(ctx, "g1", offsetsFor("lagq", 0, 3)); err != nil {
		t.Fatal(err)
	}
	lags, err := adm.GroupLag(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	var p0 *broker.PartitionLag
	for i := range lags {
		if lags[i].Topic == "lagq" && lags[i].Partition == 0 {
			p0 = &lags[i]
		}
	}
	if p0 == nil || p0.Committed != 3 || p0.End != 5 || p0.Lag != 2 {
		t.Fatalf("lag of partition 0: %+v (all: %+v)", p0, lags)
	}
}

func offsetsFor(topic string, partition int32, at int64) kadm.Offsets {
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: partition, At: at, LeaderEpoch: -1})
	return os
}

// TestDescribeTopicPartitionErrors: a partition whose offsets the broker
// answers with an error is asked again while the error is retriable, and
// is an error otherwise; it is never reported as an empty partition.
func TestDescribeTopicPartitionErrors(t *testing.T) {
	testutil.NeedsEmbedded(t, "answers with partition errors through the cluster's control hooks")
	emb, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "jobs", 2)
	cl, err := conn.NewClient(kgo.DefaultProduceTopic("jobs"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Partition: 1, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()

	// failing answers ListOffsets requests for partition 1 with code, times
	// times, and counts the answers.
	failing := func(code int16, times int) *atomic.Int64 {
		var fired atomic.Int64
		c := emb.Cluster()
		c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if fired.Load() >= int64(times) {
				return nil, nil, false
			}
			fired.Add(1)
			req := kreq.(*kmsg.ListOffsetsRequest)
			resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewListOffsetsResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewListOffsetsResponseTopicPartition()
					sp.Partition = rp.Partition
					sp.ErrorCode = code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
		return &fired
	}

	fired := failing(kerr.NotLeaderForPartition.Code, 2)
	info, err := adm.DescribeTopic(context.Background(), "jobs")
	if err != nil || fired.Load() != 2 || len(info.Partitions) != 2 || info.Partitions[1].End != 1 || info.Partitions[1].Stable != 1 {
		t.Fatalf("after 2 retriable errors: %+v, %v (fired %d)", info, err, fired.Load())
	}
	emb.Cluster().DropControl()

	failing(kerr.UnknownServerError.Code, 1<<30)
	_, err = adm.DescribeTopic(context.Background(), "jobs")
	if !errors.Is(err, kerr.UnknownServerError) || !strings.Contains(err.Error(), "offset of jobs partition") {
		t.Fatalf("a persistent error: %v", err)
	}
}

// TestUnreachableBrokerErrorNoSASL pins the last part of bug 8 of issue 17:
// after the broker died in the middle of a request, the error said "is
// SASL missing?" (franz-go's guess for a connection closed right after a
// request). It now says the broker is unreachable.
func TestUnreachableBrokerErrorNoSASL(t *testing.T) {
	testutil.NeedsEmbedded(t, "its own embedded broker, closed mid-test")
	emb, err := embedded.Start(embedded.Config{})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := broker.NewAdmin(broker.Conn{Brokers: []string{emb.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	addr := emb.Addr()
	emb.Cluster().ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		go emb.Close() // the broker dies while it handles the request
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				break
			}
			c.Close()
		}
		return nil, errors.New("killed"), true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = adm.CreateTopic(ctx, "jobs", 1, nil)
	t.Logf("after the broker died: %v", err)
	if err == nil || strings.Contains(err.Error(), "SASL") || !strings.Contains(err.Error(), "unreachable") || !errors.Is(err, broker.ErrUnreachable) {
		t.Fatalf("after the broker died: %v; want an error that says the broker is unreachable, without SASL", err)
	}
}

// TestStableOffsetsWhileLeadersMove asks for the stable offsets of eight
// partitions, again and again, of a three-node broker whose leaders move
// every 100 ms: every answer must hold every partition, at the offset
// written, the partitions whose leader just moved asked again rather than
// left out.
func TestStableOffsetsWhileLeadersMove(t *testing.T) {
	testutil.NeedsEmbedded(t, "moves partition leaders on demand")
	emb, err := embedded.Start(embedded.Config{Nodes: 3, MoveLeadersEvery: embedded.MinMoveLeadersEvery})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	conn := broker.Conn{Brokers: emb.Addrs()}
	testutil.CreateTopic(t, conn, "moving", 8)
	cl, err := conn.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for p := range int32(8) {
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "moving", Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	parts := map[string][]int32{"moving": {0, 1, 2, 3, 4, 5, 6, 7}}
	first := testutil.Leaders(emb, "moving", 8)
	for i := 0; i < 2000 || slices.Equal(testutil.Leaders(emb, "moving", 8), first); i++ {
		if i == 20000 {
			t.Fatalf("the leaders never moved from %v", first)
		}
		ends, err := adm.StableOffsets(t.Context(), parts)
		if err != nil {
			t.Fatal(err)
		}
		if len(ends["moving"]) != 8 {
			t.Fatalf("ask %d: %d of 8 partitions answered: %v", i, len(ends["moving"]), ends)
		}
		for p, o := range ends["moving"] {
			if o != 1 {
				t.Fatalf("ask %d: partition %d at %d, want 1", i, p, o)
			}
		}
	}
}
