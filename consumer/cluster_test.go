package consumer_test

import (
	"slices"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestClusterMovingLeadersExactlyOnce runs a producer and an exactly-once
// worker on a three-node embedded broker whose partition leaders and
// group and transaction coordinators move every 500 ms: every task's
// output must be seen once by a read_committed reader, none lost, and each
// task's run counter must be 1.
func TestClusterMovingLeadersExactlyOnce(t *testing.T) {
	testutil.NeedsEmbedded(t, "moves partition leaders on demand")
	emb, err := embedded.Start(embedded.Config{Nodes: 3, MoveLeadersEvery: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	conn := broker.Conn{Brokers: emb.Addrs()}
	testutil.CreateTopic(t, conn, "in", 8)
	testutil.CreateTopic(t, conn, "out", 8)
	first := testutil.Leaders(emb, "in", 8)

	stop := runWorker(t, consumer.Conn(conn), consumer.Group("cluster"), consumer.Queues("in"),
		consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(copyCounting("out")), consumer.SessionTimeout(6*time.Second),
		consumer.TransactionTimeout(5*time.Second), consumer.CommitInterval(50*time.Millisecond))
	// Submit in waves while the worker runs, so that moves land between
	// and during the producer's and the worker's requests.
	all := ids(3000)
	for i := 0; i < len(all); i += 300 {
		produceTasks(t, conn, "in", all[i:i+300])
		time.Sleep(300 * time.Millisecond) // pacing, not a wait: spreads the waves over moves
	}
	waitOutputs(t, conn, "out", len(all), 90*time.Second)
	if slices.Equal(testutil.Leaders(emb, "in", 8), first) {
		t.Fatalf("leaders of in are still %v: the moves did not run", first)
	}
	time.Sleep(500 * time.Millisecond) // duplicates would land after the originals
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "out"), all)
	checkRunCounters(t, conn, broker.ChangelogTopic("cluster", "in"), all)
}
