package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkatest"
	"github.com/onceq/onceq/internal/testutil"
)

// nodeKillTasks is the size of TestCrashKafkaNodeKills: 20,000 tasks, or
// ONCEQ_NODE_KILL_TASKS.
func nodeKillTasks(t *testing.T) int {
	v := os.Getenv("ONCEQ_NODE_KILL_TASKS")
	if v == "" {
		return 20_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 100 {
		t.Fatalf("ONCEQ_NODE_KILL_TASKS=%q: want a number of tasks, 100 or more", v)
	}
	return n
}

// TestCrashKafkaNodeKills runs tasks through three "onceq worker"
// processes on a three-node Apache Kafka cluster (ONCEQ_TEST_KAFKA=3:
// topics replicated three ways, two replicas in sync) while two of its
// nodes are SIGKILLed and restarted one after the other, as a rolling
// crash: the first is the group's coordinator, killed while the workers
// run the tasks submitted so far (half of them done); more tasks are submitted and run while
// it is down; it comes back and every partition is in sync again; then
// the second (the group's coordinator again, or another node) likewise.
// A fresh read_committed reader must see every ID exactly once, and the
// per-ID run counters in the changelog must each be 1.
func TestCrashKafkaNodeKills(t *testing.T) {
	if !testutil.OnKafka() {
		t.Skip("needs a three-node Apache Kafka cluster: ONCEQ_TEST_KAFKA=3")
	}
	_, conn := testutil.StartBroker(t, "")
	cluster := testutil.KafkaCluster()
	if cluster.Nodes() < 3 {
		t.Skipf("needs a three-node Apache Kafka cluster (ONCEQ_TEST_KAFKA=3); this one has %d", cluster.Nodes())
	}
	rng := seededRand(t)
	n := nodeKillTasks(t)
	const group = "nodekill"
	addrs := strings.Join(conn.Brokers, ",")
	testutil.CreateTopic(t, conn, "in", 8)
	testutil.CreateTopic(t, conn, "out", 8)
	slots := make([]*workerProc, 3)
	for i := range slots {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", i))
		slots[i] = &workerProc{dir: dir, proc: startWorker(t, addrs, group, dir)}
	}

	all := ids(n)
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	// The tasks go in 100 waves, 100 ms apart: the kills come right after
	// a wave, with its tasks still running, and waves go in while a node
	// is down.
	const waves = 100
	sent := 0
	submit := func(upTo int) {
		t.Helper()
		for ; sent < upTo; sent++ {
			lo, hi := sent*n/waves, (sent+1)*n/waves
			produceTasks(t, conn, "in", all[lo:hi])
			time.Sleep(100 * time.Millisecond) // pacing, not a wait: spreads the waves over the kills
		}
	}
	submitted := func() int { return sent * n / waves }
	begin := time.Now()
	var killed []int
	for round, at := range []int{30, 70} {
		submit(at)
		// Half the tasks submitted have run: the workers are busy.
		waitOutputsDuring(t, conn, slots, cluster, submitted()/2, 3*time.Minute)
		id := nodeToKill(t, conn, group, killed, rng)
		ran, _ := testutil.ReadCommittedErr(conn, time.Minute, "out")
		if err := cluster.Kill(id); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, id)
		t.Logf("%v: node %d SIGKILLed with %d tasks submitted, %d run", since(begin), id, submitted(), len(ran))
		submit(at + 20)
		waitOutputsDuring(t, conn, slots, cluster, submitted(), 3*time.Minute)
		t.Logf("%v: node %d down, the %d tasks submitted so far have run", since(begin), id, submitted())
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		err := cluster.Restart(ctx, id)
		if err == nil {
			err = waitInSync(ctx, conn)
		}
		cancel()
		if err != nil {
			t.Fatalf("kill %d: node %d: %v", round+1, id, err)
		}
		t.Logf("%v: node %d back, every partition in sync", since(begin), id)
	}
	submit(waves)
	waitOutputsDuring(t, conn, slots, cluster, n, 3*time.Minute)
	t.Logf("%v: %d tasks, nodes %v killed and restarted", since(begin), n, killed)
	stopWorkers(t, slots)
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "out"), all)
	checkRunCounters(t, conn, broker.ChangelogTopic(group, "in"), all)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// nodeToKill picks the next node to kill: the coordinator of group, or,
// if that one was killed already, another node not killed yet (rng).
func nodeToKill(t *testing.T, conn broker.Conn, group string, killed []int, rng *rand.Rand) int {
	t.Helper()
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	coords := kadm.NewClient(cl).FindGroupCoordinators(ctx, group)
	if c, ok := coords[group]; ok && c.Err == nil && !slices.Contains(killed, int(c.NodeID)) {
		return int(c.NodeID)
	}
	var left []int
	for id := 1; id <= testutil.KafkaCluster().Nodes(); id++ {
		if !slices.Contains(killed, id) {
			left = append(left, id)
		}
	}
	return left[rng.IntN(len(left))]
}

// waitOutputsDuring waits until a read_committed reader sees want records
// in "out", while every worker keeps running; it fails the test after
// limit with the workers' logs and the tails of the Kafka nodes' logs.
func waitOutputsDuring(t *testing.T, conn broker.Conn, slots []*workerProc, cluster *kafkatest.Cluster, want int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		checkRunning(t, slots)
		// The last stable offsets count transaction markers too: confirm
		// with a reader.
		got, err := stableCount(conn, "out")
		if err == nil && got >= want {
			recs, rerr := testutil.ReadCommittedErr(conn, time.Minute, "out")
			if got = len(recs); rerr == nil && got >= want {
				return
			}
		}
		if time.Now().After(deadline) {
			for _, s := range slots {
				t.Logf("worker %s:\n%s", s.dir, tail(s.proc.Output(), 3000))
			}
			for id := 1; id <= cluster.Nodes(); id++ {
				t.Log(cluster.LogTail(id, 30))
			}
			t.Fatalf("after %v: %d of %d outputs (%v)", limit, got, want, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stableCount is the number of offsets below the last stable offsets of
// topic: its committed records and transaction markers.
func stableCount(conn broker.Conn, topic string) (int, error) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return 0, err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := adm.DescribeTopic(ctx, topic)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range info.Partitions {
		n += int(p.Stable - p.Start)
	}
	return n, nil
}

// waitInSync waits until every partition of every topic, Kafka's own
// too, has all its replicas in sync: a restarted node has caught up, and
// the next node may go down without leaving a partition below its
// minimum of in-sync replicas.
func waitInSync(ctx context.Context, conn broker.Conn) error {
	cl, err := conn.NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		var behind []string
		md, err := adm.Metadata(ctx)
		if err == nil {
			for _, td := range md.Topics.Sorted() {
				for _, p := range td.Partitions.Sorted() {
					if p.Err != nil || len(p.ISR) < len(p.Replicas) {
						behind = append(behind, fmt.Sprintf("%s/%d", td.Topic, p.Partition))
					}
				}
			}
			if len(behind) == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("partitions not in sync: %v (%v)", behind, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
