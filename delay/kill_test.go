package delay_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// TestKilledServiceLosesNothing SIGKILLs "onceq delay" processes in the
// middle of a run: first one restarted on its state dir (same instance ID:
// it fences its predecessor's transaction and takes its partitions back),
// then one replaced by a new instance that takes over once the dead one's
// session times out. Every task is still published exactly once and none
// early.
func TestKilledServiceLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for about 20 seconds")
	}
	n := 20_000
	if raceEnabled {
		n = 5_000
	}
	_, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	createQueue(t, conn, "q", 4)
	pub := watchQueue(t, conn, "q")
	rng := seeded(t)
	stateA, stateB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	start := func(state string) *testutil.Process {
		proc := testutil.Start(t, "delay", "--brokers", conn.Brokers[0], "--buckets", "100ms,500ms,2s",
			"--state-dir", state, "--metrics-addr", "", "--session-timeout", "6s", "--transaction-timeout", "4s")
		proc.WaitOutput(t, `partitions assigned`, time.Minute)
		return proc
	}
	proc := start(stateA)
	dues := submitSpread(t, conn, p, "q", n, 8*time.Second, rng)
	pause := func() time.Duration { return time.Duration(500+rng.IntN(1500)) * time.Millisecond }

	time.Sleep(pause())
	proc.Kill()
	t.Logf("killed the first instance; %d published", pub.published())
	proc = start(stateA)

	time.Sleep(pause())
	proc.Kill()
	t.Logf("killed it again; %d published", pub.published())
	start(stateB)

	pub.wait(t, len(dues), 2*time.Minute)
	time.Sleep(500 * time.Millisecond)
	late := pub.verify(t, dues)
	t.Logf("lateness p50 %v p99 %v max %v (the service was down for a while)",
		percentile(late, 0.5), percentile(late, 0.99), late[len(late)-1])
}
