package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestChainedStages copies tasks through three queues, q1 -> q2 -> q3, with
// a group per stage whose members join and leave during the run, with the
// classic cooperative-sticky protocol and with KIP-848's. A quarter of the
// tasks have priority 9, which the first stage's members, backlogged, run
// ahead of their fetch (lookahead.go). Every ID must pass each stage
// exactly once.
func TestChainedStages(t *testing.T) {
	for _, protocol := range []string{consumer.ClassicGroup, consumer.ConsumerGroup} {
		t.Run(protocol, func(t *testing.T) {
			_, conn := testutil.StartBroker(t, "")
			for _, q := range []string{"q1", "q2", "q3"} {
				testutil.CreateTopic(t, conn, q, 6)
			}
			n := 20_000
			if testing.Short() {
				n = 4_000
			}
			all := ids(n)
			type member struct{ stop func() error }
			var members [2][]member
			start := func(stage int) {
				from, to := fmt.Sprintf("q%d", stage+1), fmt.Sprintf("q%d", stage+2)
				stop := startStageWorker(t, conn, protocol, fmt.Sprintf("stage-%d", stage+1), from, to)
				members[stage] = append(members[stage], member{stop})
			}
			leave := func(stage int) {
				m := members[stage][0]
				members[stage] = members[stage][1:]
				if err := m.stop(); err != nil {
					t.Errorf("a leaving member: %v", err)
				}
			}
			start(0)
			start(1)
			go func() {
				for i := 0; i < n; i += 1000 {
					var tasks []onceq.Task
					for j, id := range all[i:min(i+1000, n)] {
						task := onceq.Task{ID: id, Payload: []byte("payload-" + id)}
						if j%4 == 3 {
							// A quarter at priority 9: the first stage,
							// backlogged, runs them ahead of its fetch.
							task.Priority = onceq.MaxPriority
						}
						tasks = append(tasks, task)
					}
					produceQuiet(conn, "q1", tasks)
					time.Sleep(100 * time.Millisecond)
				}
			}()
			// Join, join, leave, join, leave: at every step each stage
			// rebalances while tasks run.
			for step, join := range []bool{true, true, false, true, false} {
				time.Sleep(700 * time.Millisecond)
				for stage := 0; stage < 2; stage++ {
					if join {
						start(stage)
					} else {
						leave(stage)
					}
				}
				t.Logf("step %d: stage members %d and %d", step, len(members[0]), len(members[1]))
			}
			if outs := waitOutputs(t, conn, "q3", n, 3*time.Minute); len(outs) < n {
				explainMissing(t, conn, all, outs, "q1", "q2")
			}
			time.Sleep(time.Second)
			for stage := 0; stage < 2; stage++ {
				for len(members[stage]) > 0 {
					leave(stage)
				}
			}
			checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "q2"), all)
			checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "q3"), all)
		})
	}
}

// startStageWorker runs an in-process worker copying from one queue to the
// next, counting runs.
func startStageWorker(t *testing.T, conn broker.Conn, protocol, group, from, to string) (stop func() error) {
	w, err := consumer.New(consumer.Conn(conn), consumer.Group(group), consumer.Queues(from), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(copyCounting(to)), consumer.GroupProtocol(protocol), consumer.CommitInterval(50*time.Millisecond),
		consumer.SessionTimeout(6*time.Second), consumer.TransactionTimeout(5*time.Second), consumer.MaxBufferedRecords(2000))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// explainMissing logs, while the members still run, what a test needs to
// tell a lost task from a stuck one: where each missing ID sits in the
// stages' inputs (the first 20 records of each) and the broker's groups,
// lags and topics.
func explainMissing(t *testing.T, conn broker.Conn, all []string, outs []*kgo.Record, inputs ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range outs {
		if task, err := onceq.FromRecord(r); err == nil {
			seen[task.ID] = true
		}
	}
	missing := map[string]bool{}
	for _, id := range all {
		if !seen[id] {
			missing[id] = true
		}
	}
	for _, input := range inputs {
		logged := 0
		for _, r := range testutil.ReadCommitted(t, conn, time.Minute, input) {
			if task, err := onceq.FromRecord(r); err == nil && missing[task.ID] && logged < 20 {
				t.Logf("missing %s is in %s/%d at offset %d", task.ID, r.Topic, r.Partition, r.Offset)
				logged++
			}
		}
	}
	t.Logf("broker:\n%s", testutil.BrokerState(conn))
}
