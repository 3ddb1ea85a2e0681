package consumer_test

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCrashPoints kills a worker process at each point of its third
// commit, while tasks flow: before the Kafka transaction, between the Kafka commit and the
// checkpoint, and after both. The restarted worker, on the same checkpoint
// dir, must reconcile (the checkpoint from the changelog) and lose or repeat
// nothing, also for duplicates submitted after the restart.
func TestCrashPoints(t *testing.T) {
	for _, point := range []consumer.CommitPoint{consumer.BeforeKafkaCommit, consumer.BetweenCommits, consumer.AfterCommits} {
		t.Run(point.String(), func(t *testing.T) {
			_, conn := testutil.StartBroker(t, "")
			addr := conn.Brokers[0]
			testutil.CreateTopic(t, conn, "in", 4)
			testutil.CreateTopic(t, conn, "out", 4)
			all := ids(3000)
			dir := filepath.Join(t.TempDir(), "w")
			p := startWorker(t, addr, "cp", dir, "--crash-at", fmt.Sprintf("%s:3", point), "--commit-interval", "20ms")
			// A batch at a time, each once the worker committed the last
			// (a worker that starts slowly, as on Apache Kafka, must not
			// find them all there and run them in fewer than 3 commits),
			// until it is killed; the rest go to the restarted worker.
			sent := 0
			for sent < len(all) && !p.Exited() {
				produceTasks(t, conn, "in", all[sent:sent+300])
				sent += 300
				for deadline := time.Now().Add(time.Minute); !p.Exited(); time.Sleep(20 * time.Millisecond) {
					if recs, _ := testutil.ReadCommittedErr(conn, 30*time.Second, "out"); len(recs) >= sent {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the worker committed fewer than %d outputs in a minute\n%s", sent, p.Output())
					}
				}
			}
			code, err := p.Wait(60 * time.Second)
			if err != nil || code != -1 || !p.Cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
				t.Fatalf("the worker was not killed at its commit point: exit %d, %v\n%s", code, err, p.Output())
			}
			startWorker(t, addr, "cp", dir)
			if sent < len(all) {
				produceTasks(t, conn, "in", all[sent:])
			}
			produceTasks(t, conn, "in", all[:500]) // duplicates, some processed before the crash
			waitOutputs(t, conn, "out", len(all), 60*time.Second)
			time.Sleep(time.Second)
			checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 30*time.Second, "out"), all)
			checkRunCounters(t, conn, broker.ChangelogTopic("cp", "in"), all)
		})
	}
}
