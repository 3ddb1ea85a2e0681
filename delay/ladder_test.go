package delay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestClusterLadder: a cluster's ladder is the default until set; the
// first process given a ladder sets it, a process given none routes by
// it, and a process given another is refused, naming the command that
// changes it.
func TestClusterLadder(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, set, err := delay.ReadLadder(ctx, conn)
	if err != nil || set || !p.Equal(delay.DefaultPlanner()) {
		t.Fatalf("a new cluster's ladder: %v set %v, %v; want the default, unset", p.Buckets(), set, err)
	}
	short := shortLadder(t)
	if got, err := delay.ClusterPlanner(ctx, conn, short); err != nil || !got.Equal(short) {
		t.Fatalf("the first ladder given: %v, %v", got, err)
	}
	if got, err := delay.ClusterPlanner(ctx, conn, nil); err != nil || !got.Equal(short) {
		t.Fatalf("no ladder given: %v, %v; want the cluster's", got, err)
	}
	_, err = delay.ClusterPlanner(ctx, conn, delay.DefaultPlanner())
	if !errors.Is(err, delay.ErrLadderMismatch) {
		t.Fatalf("another ladder: %v, want ErrLadderMismatch", err)
	}
	for _, want := range []string{"100ms 500ms 2s", "onceq delay ladder set"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	// A change is explicit, and applies to the processes started after.
	if err := delay.SetLadder(ctx, conn, delay.DefaultPlanner()); err != nil {
		t.Fatal(err)
	}
	if got, err := delay.ClusterPlanner(ctx, conn, delay.DefaultPlanner()); err != nil || !got.Equal(delay.DefaultPlanner()) {
		t.Fatalf("after the change: %v, %v", got, err)
	}
}

// TestLadderChangeStrandsNothing: tasks routed by the old ladder, before
// the ladder changed, and by a producer given no ladder after, all reach
// their queue through a delay service of the new ladder: it reads every
// bucket topic that exists.
func TestLadderChangeStrandsNothing(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createQueue(t, conn, "q", 2)
	pub := watchQueue(t, conn, "q")
	submit := func(p *producer.Producer, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, err := p.Submit(ctx, onceq.Task{ID: id, Queue: "q", Delay: 1500 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
		}
	}
	old, err := producer.New(producer.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	submit(old, "old-1", "old-2") // the default ladder: onceq-delay-1s
	if err := delay.SetLadder(ctx, conn, shortLadder(t)); err != nil {
		t.Fatal(err)
	}
	submit(old, "old-3") // a producer started before the change keeps its ladder
	fresh, err := producer.New(producer.Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	submit(fresh, "new-1") // the new ladder: onceq-delay-500ms
	runService(t, delay.Conn(conn), delay.Logger(testLogger()))
	pub.wait(t, 4, 30*time.Second)
	pub.mu.Lock()
	for _, id := range []string{"old-1", "old-2", "old-3", "new-1"} {
		if n := len(pub.recs[id]); n != 1 {
			t.Errorf("%s published %d times, want once", id, n)
		}
	}
	pub.mu.Unlock()
	for _, topic := range []string{"onceq-delay-1s", "onceq-delay-500ms"} {
		if recs := testutil.ReadCommitted(t, conn, 5*time.Second, topic); len(recs) == 0 {
			t.Errorf("%s holds nothing: the tasks did not go through both ladders", topic)
		}
	}
}
