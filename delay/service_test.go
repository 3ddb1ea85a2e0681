package delay_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	runService(t, delay.Conn(conn), delay.WithPlanner(p), delay.Logger(testLogger()))
	start := time.Now()
	dues := submitSpread(t, conn, p, "q", n, 5*time.Second, seeded(t))
	t.Logf("submitted %d tasks in %v", n, time.Since(start).Round(time.Millisecond))
	pub.wait(t, len(dues), time.Minute)
	time.Sleep(300 * time.Millisecond) // duplicates, if any, would show up now
	late := pub.verify(t, dues)
	t.Logf("%d tasks published in %v; lateness p50 %v p99 %v max %v", n, time.Since(start).Round(time.Millisecond),
		percentile(late, 0.5), percentile(late, 0.99), late[len(late)-1])
}

// TestRebalance shares the buckets between instances of one group while
// tasks flow: a second instance joins, the first leaves cleanly, a third
// joins. Transactions aborted by the rebalances are read again; every task
// is still published exactly once and none early.
func TestRebalance(t *testing.T) {
	n := 20_000
	if testing.Short() || raceEnabled {
		n = 5_000
	}
	_, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	createQueue(t, conn, "q", 4)
	pub := watchQueue(t, conn, "q")
	rng := seeded(t)
	opts := func(id string) []delay.ServiceOpt {
		return []delay.ServiceOpt{delay.Conn(conn), delay.WithPlanner(p), delay.Logger(testLogger()), delay.InstanceID(id),
			delay.SessionTimeout(6 * time.Second), delay.TransactionTimeout(4 * time.Second)}
	}
	stopA := runService(t, opts("a")...)
	dues := submitSpread(t, conn, p, "q", n, 6*time.Second, rng)
	time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
	runService(t, opts("b")...)
	time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	stopA()
	t.Logf("a left; %d published", pub.published())
	time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
	runService(t, opts("c")...)
	pub.wait(t, len(dues), time.Minute)
	time.Sleep(500 * time.Millisecond)
	late := pub.verify(t, dues)
	t.Logf("lateness p50 %v p99 %v max %v", percentile(late, 0.5), percentile(late, 0.99), late[len(late)-1])
}

// TestLadderChange stops an instance running 100ms 500ms 2s in the middle
// of a run and continues with a ladder that adds a smaller bucket, 50ms:
// release times change with the smallest bucket, and the records the first
// instance moved out of order are still skipped, not moved twice.
func TestLadderChange(t *testing.T) {
	n := 10_000
	if testing.Short() || raceEnabled {
		n = 3_000
	}
	_, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	wider, err := delay.ParseLadder("50ms 100ms 500ms 2s")
	if err != nil {
		t.Fatal(err)
	}
	createQueue(t, conn, "q", 4)
	pub := watchQueue(t, conn, "q")
	rng := seeded(t)
	stop := runService(t, delay.Conn(conn), delay.WithPlanner(p), delay.Logger(testLogger()), delay.InstanceID("a"))
	dues := submitSpread(t, conn, p, "q", n, 4*time.Second, rng)
	time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	stop()
	t.Logf("stopped the first ladder; %d published", pub.published())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := delay.SetLadder(ctx, conn, wider); err != nil {
		t.Fatal(err)
	}
	runService(t, delay.Conn(conn), delay.WithPlanner(wider), delay.Logger(testLogger()), delay.InstanceID("b"))
	pub.wait(t, len(dues), time.Minute)
	time.Sleep(500 * time.Millisecond)
	late := pub.verify(t, dues)
	t.Logf("lateness p50 %v p99 %v max %v", percentile(late, 0.5), percentile(late, 0.99), late[len(late)-1])
}

// TestStopDuringStartup pins a service told to stop while still starting
// exiting with an error instead of stopping cleanly.
func TestStopDuringStartup(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	for _, after := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond,
		60 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		svc, err := delay.NewService(delay.Conn(conn), delay.WithPlanner(shortLadder(t)), delay.StateDir(t.TempDir()),
			delay.Logger(testLogger()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(after, cancel)
		if err := svc.Run(ctx); err != nil {
			t.Errorf("stopped %v after the start: %v", after, err)
		}
		cancel()
	}
}

// TestStopWhileWaitingForCommittedOffsets pins a service told to stop while
// it waited for a partition's committed offsets (the previous owner's
// transaction still open: UNSTABLE_OFFSET_COMMIT) exiting with "context
// canceled" instead of stopping cleanly, when the partition had come with
// records in the same poll.
func TestStopWhileWaitingForCommittedOffsets(t *testing.T) {
	testutil.NeedsEmbedded(t, "holds OffsetFetch answers through the cluster's control hooks")
	emb, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	createQueue(t, conn, "q", 1)
	submitSpread(t, conn, p, "q", 200, 3*time.Second, seeded(t))
	var unstable atomic.Int32
	emb.Cluster().ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		emb.Cluster().KeepControl()
		r := req.(*kmsg.OffsetFetchRequest)
		if !r.RequireStable || len(r.Groups) != 1 || r.Groups[0].Topics != nil {
			return nil, nil, false // the consumer's own fetch of its starting offsets
		}
		unstable.Add(1)
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.Version = r.Version
		for _, g := range r.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			rg.ErrorCode = kerr.UnstableOffsetCommit.Code
			resp.Groups = append(resp.Groups, rg)
		}
		resp.ErrorCode = kerr.UnstableOffsetCommit.Code
		return resp, nil, true
	})
	svc, err := delay.NewService(delay.Conn(conn), delay.WithPlanner(p), delay.StateDir(t.TempDir()),
		delay.Logger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for unstable.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if unstable.Load() < 3 {
		t.Fatal("the service never asked for stable offsets")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stopped while waiting for committed offsets: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not stop")
	}
}
