package consumer_test

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestDiskFaults fails a write or a sync of a worker process's checkpoint
// log in the middle of a run. The worker must stop (an error exit, or the
// crash Pebble makes of a failure while it rotates its log) and claim no
// commit that did not happen: restarted on the same dir with a healthy
// disk, it replays the changelog and every task is copied exactly once,
// duplicates submitted afterwards included.
func TestDiskFaults(t *testing.T) {
	for _, op := range []string{"write", "sync"} {
		t.Run(op, func(t *testing.T) {
			_, conn := testutil.StartBroker(t, "")
			addr := conn.Brokers[0]
			testutil.CreateTopic(t, conn, "in", 4)
			testutil.CreateTopic(t, conn, "out", 4)
			all := ids(4000)
			dir := filepath.Join(t.TempDir(), "w")
			p := startWorker(t, addr, "disk", dir, "--fault-disk", op+":6", "--max-buffered", "300", "--commit-interval", "20ms")
			// Each batch waits for the last one's outputs, so that the run
			// makes a commit, and a synced checkpoint write, per batch at
			// least, however fast the worker drains what is there.
			for i := 0; i < len(all); i += 400 {
				produceTasks(t, conn, "in", all[i:i+400])
				for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && !p.Exited(); time.Sleep(20 * time.Millisecond) {
					if n, err := stableCount(conn, "out"); err == nil && n >= i+400 {
						break
					}
				}
			}
			code, err := p.Wait(60 * time.Second)
			if err != nil {
				// Still running: its goroutines say where it is stuck.
				p.Signal(syscall.SIGQUIT)
				_, _ = p.Wait(10 * time.Second)
				t.Fatalf("the worker did not stop on the disk fault: %v; its goroutines:\n%s", err, tail(p.Output(), 30000))
			}
			if code == 0 {
				t.Fatalf("the worker exited 0 after the disk fault, want an error exit:\n%s", tail(p.Output(), 2000))
			}
			t.Logf("the worker stopped with exit %d: %s", code, tail(p.Output(), 300))
			startWorker(t, addr, "disk", dir)
			produceTasks(t, conn, "in", all[:1000]) // duplicates of what ran before the fault
			waitOutputs(t, conn, "out", len(all), 60*time.Second)
			time.Sleep(time.Second)
			checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 30*time.Second, "out"), all)
			checkRunCounters(t, conn, broker.ChangelogTopic("disk", "in"), all)
		})
	}
}
