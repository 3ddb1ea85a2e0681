package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestEmbeddedPersistence writes 10,000 records in transactions, restarts
// the broker on the same data dir and reads all of them back with
// read_committed.
func TestEmbeddedPersistence(t *testing.T) {
	const n = 10_000
	dir := t.TempDir()
	emb, err := broker.StartEmbedded(broker.EmbeddedConfig{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	conn := broker.Conn{Brokers: []string{emb.Addr()}}
	testutil.CreateTopic(t, conn, "persist", 4)
	clusterID := emb.ClusterID()

	cl, err := conn.NewClient(kgo.TransactionalID("persist-test"), kgo.DefaultProduceTopic("persist"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for batch := 0; batch < 10; batch++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n/10; i++ {
			id := batch*(n/10) + i
			cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(id)), Value: []byte(fmt.Sprintf("v%d", id))}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	emb.Close()

	emb2, err := broker.StartEmbedded(broker.EmbeddedConfig{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer emb2.Close()
	if emb2.ClusterID() != clusterID {
		t.Fatalf("cluster ID changed across restart: %s then %s", clusterID, emb2.ClusterID())
	}
	recs := testutil.ReadCommitted(t, broker.Conn{Brokers: []string{emb2.Addr()}}, time.Minute, "persist")
	seen := make(map[string]bool, n)
	for _, r := range recs {
		if string(r.Value) != "v"+string(r.Key) {
			t.Fatalf("record %s has value %s", r.Key, r.Value)
		}
		seen[string(r.Key)] = true
	}
	if len(recs) != n || len(seen) != n {
		t.Fatalf("read %d records (%d distinct) after restart, want %d", len(recs), len(seen), n)
	}
}

func TestEmbeddedDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	emb, err := broker.StartEmbedded(broker.EmbeddedConfig{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = broker.StartEmbedded(broker.EmbeddedConfig{DataDir: dir})
	if !errors.Is(err, broker.ErrDataDirInUse) {
		t.Fatalf("second broker on one data dir: got %v, want ErrDataDirInUse", err)
	}
	emb.Close()
	emb2, err := broker.StartEmbedded(broker.EmbeddedConfig{DataDir: dir})
	if err != nil {
		t.Fatalf("data dir not released by Close: %v", err)
	}
	emb2.Close()
}

func TestEmbeddedBadListen(t *testing.T) {
	for _, addr := range []string{"nope", "127.0.0.1:x", "127.0.0.1:70000"} {
		if _, err := broker.StartEmbedded(broker.EmbeddedConfig{Listen: addr}); !errors.Is(err, broker.ErrConfig) {
			t.Errorf("listen %q: got %v, want ErrConfig", addr, err)
		}
	}
}

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
