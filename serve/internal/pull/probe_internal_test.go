package pull

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// TestLeaseRunner: a lease names the server whose handler runs its task:
// the taker of its own run, or the server that granted it to the taker.
func TestLeaseRunner(t *testing.T) {
	at := time.Unix(1000, 0)
	var st leaseState
	take := takeOf("L1", 7)
	take.Holder = "a"
	st.apply(take, at)
	if st.Runner != "a" {
		t.Fatalf("a take of a's own run: runner %q, want a", st.Runner)
	}
	st.apply(leaseEvent{Kind: evExpire, Nonce: "e1", Lease: "L1"}, at)
	st.apply(leaseEvent{Kind: evGrant, Nonce: "G1", Holder: "b", Runner: "c", Partition: 0, Offset: 9, Until: 3000, Task: &wireTask{}}, at)
	if st.Runner != "c" {
		t.Fatalf("granted by c: runner %q, want c", st.Runner)
	}
	take = takeOf("L2", 9)
	take.Holder = "b"
	if !st.apply(take, at) || st.Runner != "c" || st.Holder != "b" {
		t.Fatalf("b's take of c's grant: %+v; want it counted, run by c", st)
	}
}

// TestProbeAnswersWhileAlive: a probe of a server whose ledger runs is
// answered, and says whether its handlers run the task asked about, and
// so is a ping of its pull worker's instance ID; a server's rejoin event
// reaches the others. Once that server is gone, neither is answered, and
// a server never takes another's probe for its own.
func TestProbeAnswersWhileAlive(t *testing.T) {
	_, conn := testutil.StartBroker(t, t.TempDir())
	ctx := context.Background()
	open := func() *ledger {
		lg, err := openLedger(ctx, conn, "probes", slog.New(slog.DiscardHandler), nil, nil, func(key string) bool { return key == "held" })
		if err != nil {
			t.Fatal(err)
		}
		return lg
	}
	a, b := open(), open()
	defer a.close()
	rejoined := make(chan struct{}, 1)
	b.answerFor("member-b", func() { rejoined <- struct{}{} })
	wait := 30 * time.Second // a loaded machine answers late, not never
	if answered, held, err := a.ask(ctx, b.id, "held", wait); err != nil || !answered || !held {
		t.Fatalf("probe of a live server that runs the task: answered %v, runs %v, err %v", answered, held, err)
	}
	began := time.Now()
	if answered, held, err := a.ask(ctx, b.id, "other", wait); err != nil || !answered || held {
		t.Fatalf("probe of a live server that does not run the task: answered %v, runs %v, err %v", answered, held, err)
	}
	if d := time.Since(began); d >= wait {
		t.Fatalf("probe of a live server answered after %v: its wait", d)
	}
	if alive, err := a.ping(ctx, "member-b", wait); err != nil || !alive {
		t.Fatalf("ping of a live server's pull worker: answered %v, err %v", alive, err)
	}
	if err := a.rejoinAll(ctx, "member-c"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rejoined:
	case <-time.After(wait):
		t.Fatal("a rejoin event did not reach the other server")
	}
	b.close()
	for _, probe := range []struct{ holder, key string }{{b.id, "held"}, {"member-b", ""}, {"no-such-server", "held"}} {
		began = time.Now()
		if answered, held, err := a.ask(ctx, probe.holder, probe.key, time.Second); err != nil || answered || held {
			t.Fatalf("probe of %s, closed or never there: answered %v, runs %v, err %v", probe.holder, answered, held, err)
		}
		if d := time.Since(began); d < time.Second {
			t.Fatalf("probe of %s, closed or never there, returned after %v: before its wait", probe.holder, d)
		}
	}
}
