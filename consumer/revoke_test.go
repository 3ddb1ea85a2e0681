package consumer_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestSecondRevokeBeforeTheCommitReleasesThePartition pins the duplicates
// of the chaos bench with a killed broker. franz-go's transact session
// tells the worker of the first revocation between two ends of a
// transaction and swallows the next ones (GroupTransactSession's
// OnPartitionsRevoked wrapper returns early while its revoked flag is
// set, and only End clears it). A worker whose commit was held up while
// two rebalances took a partition each from it kept the second one: it
// committed its finished tasks there after the partition's new owner had
// restored it and run them again.
//
// Here worker a owns three partitions and finishes a batch of tasks whose
// commit waits while b joins (a revokes one partition, and hears of it)
// and c joins (a revokes another, and does not hear of it). b and c run
// their partitions' tasks; then a's commit goes on. Every task must be in
// the output once.
func TestSecondRevokeBeforeTheCommitReleasesThePartition(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 3)
	testutil.CreateTopic(t, conn, "out", 3)
	opts := func(name string, extra ...consumer.Opt) []consumer.Opt {
		return append([]consumer.Opt{consumer.Conn(conn), consumer.Group("g"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
			consumer.WithHandler(copyCountingAs("out", name)), consumer.CommitInterval(20 * time.Millisecond)}, extra...)
	}

	// a's commits stop at the hook once held is set, until release closes.
	var (
		mu      sync.Mutex
		hold    bool
		holding = make(chan struct{})
		release = make(chan struct{})
	)
	hook := func(p consumer.CommitPoint) {
		if p != consumer.BeforeKafkaCommit {
			return
		}
		mu.Lock()
		h := hold
		hold = false
		mu.Unlock()
		if h {
			close(holding)
			<-release
		}
	}
	stopA := runWorker(t, opts("a", consumer.CommitHook(hook))...)
	defer stopA()
	warm := ids(30)
	produceTasks(t, conn, "in", warm)
	waitOutputs(t, conn, "out", len(warm), 30*time.Second)

	batch := make([]string, 300)
	for i := range batch {
		batch[i] = fmt.Sprintf("batch-%d", i)
	}
	mu.Lock()
	hold = true
	mu.Unlock()
	produceTasks(t, conn, "in", batch)
	select {
	case <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("worker a never committed the batch")
	}

	// Each join moves one of a's partitions, in a rebalance of its own: c
	// joins once b runs tasks. Both run their partitions' tasks again: a
	// committed none.
	stopB := runWorker(t, opts("b")...)
	defer stopB()
	waitRanBy(t, conn, "b")
	stopC := runWorker(t, opts("c")...)
	defer stopC()
	waitRanBy(t, conn, "c")

	close(release)
	all := append(warm, batch...)
	waitOutputs(t, conn, "out", len(all), 60*time.Second)
	for _, stop := range []func() error{stopA, stopB, stopC} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 30*time.Second, "out"), all)
}

// waitRanBy waits until out holds an output of worker.
func waitRanBy(t *testing.T, conn broker.Conn, worker string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, r := range testutil.ReadCommitted(t, conn, 30*time.Second, "out") {
			for _, h := range r.Headers {
				if h.Key == "worker" && string(h.Value) == worker {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s ran no task", worker)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
