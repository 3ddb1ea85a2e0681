package delay_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
)

func shortLadder(t testing.TB) *delay.Planner {
	p, err := delay.ParseLadder("100ms 500ms 2s")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func seeded(t testing.TB) *rand.Rand {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(uint64(seed), 1))
}

// TestExactlyOnceNeverEarly runs 50,000 tasks with delays spread over 0-5s
// through the short ladder 100ms 500ms 2s in real time: each is published
// to its queue exactly once and none before its due time, judged by the
// queue's broker append time.
func TestExactlyOnceNeverEarly(t *testing.T) {
	n := 50_000
	switch {
	case testing.Short():
		n = 5_000
	case raceEnabled:
		n = 10_000
	}
	_, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	createQueue(t, conn, "q", 4)
	pub := watchQueue(t, conn, "q")
	runService(t, delay.WithConn(conn), delay.WithPlanner(p), delay.WithLogger(testLogger()))
	start := time.Now()
	dues := submitSpread(t, conn, p, "q", n, 5*time.Second, seeded(t))
	t.Logf("submitted %d tasks in %v", n, time.Since(start).Round(time.Millisecond))
	pub.wait(t, len(dues), time.Minute)
	time.Sleep(300 * time.Millisecond) // duplicates, if any, would show up now
	late := pub.verify(t, dues)
	t.Logf("%d tasks published in %v; lateness p50 %v p99 %v max %v", n, time.Since(start).Round(time.Millisecond),
		percentile(late, 0.5), percentile(late, 0.99), late[len(late)-1])
}
