package consumer_test

import (
	"path/filepath"
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
			for i := 0; i < len(all); i += 400 {
				produceTasks(t, conn, "in", all[i:i+400])
				time.Sleep(50 * time.Millisecond)
			}
			code, err := p.Wait(60 * time.Second)
			if err != nil || code == 0 {
				t.Fatalf("the worker did not stop on the disk fault: exit %d, %v\n%s", code, err, tail(p.Output(), 2000))
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
