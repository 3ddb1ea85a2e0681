package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/internal/testutil"
)

// TestClusterNodesAndMoves starts three nodes on free ports, checks that
// clients see all three in metadata and that MoveLeaders moves leaders
// and coordinators across them.
func TestClusterNodesAndMoves(t *testing.T) {
	emb, err := embedded.Start(embedded.Config{Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	addrs := emb.Addrs()
	if len(addrs) != 3 || addrs[0] != emb.Addr() || addrs[0] == addrs[1] || addrs[1] == addrs[2] {
		t.Fatalf("addrs %v, addr %s: want three distinct, the first Addr", addrs, emb.Addr())
	}
	conn := broker.Conn{Brokers: []string{emb.Addr()}}
	testutil.CreateTopic(t, conn, "spread", 8)
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil || len(meta.Brokers) != 3 {
		t.Fatalf("metadata: %v: want 3 brokers, got %+v", err, meta)
	}

	before, coord := testutil.Leaders(emb, "spread", 8), emb.Cluster().CoordinatorFor("some-group")
	movedLeader, movedCoord := false, false
	for i := 0; i < 50 && !(movedLeader && movedCoord); i++ { // each move is random: some keep their node
		emb.MoveLeaders()
		movedLeader = movedLeader || !slices.Equal(testutil.Leaders(emb, "spread", 8), before)
		movedCoord = movedCoord || emb.Cluster().CoordinatorFor("some-group") != coord
	}
	if !movedLeader || !movedCoord {
		t.Fatalf("50 moves: leaders moved %v, coordinator moved %v", movedLeader, movedCoord)
	}
	// Clients follow: a produce after the moves lands.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "spread", Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("producing after moves: %v", err)
	}
}

// TestClusterPersistence writes to a three-node cluster on a data dir
// while its leaders move, restarts it and reads every record back: the
// nodes share one log, and the data dir keeps each partition's leader.
func TestClusterPersistence(t *testing.T) {
	const n = 2000
	dir := t.TempDir()
	emb, err := embedded.Start(embedded.Config{Nodes: 3, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	conn := broker.Conn{Brokers: []string{emb.Addr()}}
	testutil.CreateTopic(t, conn, "persist", 8)
	cl, err := conn.NewClient(kgo.DefaultProduceTopic("persist"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for batch := range 10 {
		recs := make([]*kgo.Record, 0, n/10)
		for i := range n / 10 {
			id := batch*(n/10) + i
			recs = append(recs, &kgo.Record{Key: fmt.Append(nil, id), Value: fmt.Appendf(nil, "v%d", id)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		emb.MoveLeaders()
	}
	cl.Close()
	want := testutil.Leaders(emb, "persist", 8)
	emb.Close()

	emb2, err := embedded.Start(embedded.Config{Nodes: 3, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer emb2.Close()
	if got := testutil.Leaders(emb2, "persist", 8); !slices.Equal(got, want) {
		t.Errorf("leaders %v after restart, want %v", got, want)
	}
	checkReadBack(t, emb2, "persist", n)
}

// TestClusterBadConfig: node counts and move intervals out of range are
// refused as configuration errors.
func TestClusterBadConfig(t *testing.T) {
	for _, cfg := range []embedded.Config{
		{Nodes: -1},
		{Nodes: embedded.MaxNodes + 1},
		{Nodes: 3, Listen: "127.0.0.1:65534"},
		{MoveLeadersEvery: -time.Second},
		{MoveLeadersEvery: time.Millisecond},
	} {
		if emb, err := embedded.Start(cfg); !errors.Is(err, broker.ErrConfig) {
			if err == nil {
				emb.Close()
			}
			t.Errorf("%+v: got %v, want ErrConfig", cfg, err)
		}
	}
}

// TestMovesDeliverOnce consumes four partitions while a producer writes
// to them and the leaders move every 100 ms: every record must come once,
// in offset order. A move bumps each partition's leader epoch, and a
// consumer then asks the new leader where its old epoch ended; answered
// "undefined epoch", franz-go resets to the partition's start and delivers
// everything again (see answerLeaderEpochs).
func TestMovesDeliverOnce(t *testing.T) {
	emb, err := embedded.Start(embedded.Config{Nodes: 3, MoveLeadersEvery: embedded.MinMoveLeadersEvery})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	conn := broker.Conn{Brokers: emb.Addrs()}
	testutil.CreateTopic(t, conn, "moving", 4)
	prod, err := conn.NewClient(kgo.DefaultProduceTopic("moving"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 20_000
	go func() {
		for i := range n {
			prod.Produce(ctx, &kgo.Record{Value: fmt.Append(nil, i)}, nil)
			if i%500 == 499 {
				time.Sleep(25 * time.Millisecond) // spreads the writes over many moves
			}
		}
	}()
	cl, err := conn.NewClient(kgo.ConsumeTopics("moving"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	next := map[int32]int64{}
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records within a minute", got, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d delivered after %d", r.Partition, r.Offset, next[r.Partition]-1)
			}
			next[r.Partition]++
			got++
		})
	}
}
