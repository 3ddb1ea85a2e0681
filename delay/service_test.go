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

func TestServiceSmall(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	createQueue(t, conn, "q", 4)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	pub := watchQueue(t, conn, "q")
	runService(t, delay.WithConn(conn), delay.WithPlanner(p), delay.WithLogger(testLogger()))
	dues := submitSpread(t, conn, p, "q", 2000, 3*time.Second, rng)
	pub.wait(t, len(dues), 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	late := pub.verify(t, dues)
	t.Logf("lateness p50 %v p99 %v max %v", percentile(late, 0.5), percentile(late, 0.99), late[len(late)-1])
}
