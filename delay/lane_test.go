package delay_test

import (
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
)

// TestLaneQueuesComeBackToTheirLane: delayed tasks of two lane queues
// of one lane come back to the lane's topic, each once, never early, and
// each still naming its own queue.
func TestLaneQueuesComeBackToTheirLane(t *testing.T) {
	const n = 200
	_, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	createQueue(t, conn, "fn", 2)
	pub := watchQueue(t, conn, "fn")
	runService(t, delay.Conn(conn), delay.WithPlanner(p), delay.Logger(testLogger()))
	rng := seeded(t)
	dues := submitSpread(t, conn, p, "fn/resize", n, 2*time.Second, rng)
	for id, due := range submitSpread(t, conn, p, "fn/mail", n, 2*time.Second, rng) {
		dues["mail-"+id] = due
	}
	pub.wait(t, len(dues), time.Minute)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for id, rs := range pub.recs {
		// The two queues' IDs are the same: a record per queue each.
		if len(rs) != 2 {
			t.Errorf("task %s came back %d times, want once per queue", id, len(rs))
			continue
		}
		queues := map[string]bool{}
		for _, r := range rs {
			task, err := onceq.FromRecord(r)
			if err != nil {
				t.Errorf("task %s: %v", id, err)
				continue
			}
			queues[task.Queue] = true
			if r.Timestamp.Before(task.Due) {
				t.Errorf("task %s of %s back at %v, before its due time %v", id, task.Queue, r.Timestamp, task.Due)
			}
		}
		if !queues["fn/resize"] || !queues["fn/mail"] {
			t.Errorf("task %s came back to queues %v, want fn/resize and fn/mail", id, queues)
		}
	}
}
