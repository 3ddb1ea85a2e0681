package embedded_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker/embedded"
)

// TestStaticReplacementDuringSyncCompletes replaces a static member (its
// process restarted: same instance ID, no member ID) while the member it
// replaces waits in SyncGroup, the moment at which kfake's count of
// joined members falls one short. The rebalance that follows must still
// complete within the capped deadline (half the session timeout), not
// kfake's default of the rebalance timeout the members asked for (60s).
func TestStaticReplacementDuringSyncCompletes(t *testing.T) {
	b, err := embedded.Start(embedded.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	// The instance IDs of the joins and syncs kfake took, in order.
	joins, syncs := make(chan string, 16), make(chan string, 16)
	c := b.Cluster()
	c.ControlKey(int16(kmsg.JoinGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		joins <- *kreq.(*kmsg.JoinGroupRequest).InstanceID
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.SyncGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		syncs <- *kreq.(*kmsg.SyncGroupRequest).InstanceID
		return nil, nil, false
	})
	took := func(ch <-chan string, want string) {
		t.Helper()
		if got := <-ch; got != want {
			t.Fatalf("kfake took a request of %q, want %q", got, want)
		}
	}
	client := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	// Without the cap the last joins wait for kfake's deadline, 60s.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	type joined struct {
		resp *kmsg.JoinGroupResponse
		err  error
		took time.Duration
	}
	join := func(cl *kgo.Client, instance, member string) <-chan joined {
		ch := make(chan joined, 1)
		go func() {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group, req.InstanceID, req.MemberID = "g", kmsg.StringPtr(instance), member
			req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 6000, 60000
			req.ProtocolType = "test"
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name = "p"
			req.Protocols = append(req.Protocols, p)
			start := time.Now()
			resp, err := req.RequestWith(ctx, cl)
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			ch <- joined{resp, err, time.Since(start)}
		}()
		return ch
	}
	sync := func(cl *kgo.Client, instance string, j joined, assign bool) <-chan error {
		ch := make(chan error, 1)
		go func() {
			req := kmsg.NewPtrSyncGroupRequest()
			req.Group, req.InstanceID, req.MemberID, req.Generation = "g", kmsg.StringPtr(instance), j.resp.MemberID, j.resp.Generation
			if assign {
				for _, m := range j.resp.Members {
					a := kmsg.NewSyncGroupRequestGroupAssignment()
					a.MemberID = m.MemberID
					req.GroupAssignment = append(req.GroupAssignment, a)
				}
			}
			resp, err := req.RequestWith(ctx, cl)
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			ch <- err
		}()
		return ch
	}
	must := func(what string, j joined) joined {
		t.Helper()
		if j.err != nil {
			t.Fatalf("%s: %v (after %v)", what, j.err, j.took.Round(time.Millisecond))
		}
		return j
	}
	clA, clB, clB2 := client(), client(), client()

	// A alone: generation 1, A leads.
	a := must("A joins", <-join(clA, "a", ""))
	took(joins, "a")
	if err := <-sync(clA, "a", a, true); err != nil {
		t.Fatal(err)
	}
	took(syncs, "a")
	// B joins, A rejoins: generation 2, both in it; A still leads.
	bj := join(clB, "b", "")
	took(joins, "b")
	a2j := join(clA, "a", a.resp.MemberID)
	took(joins, "a")
	a2, bm := must("A rejoins", <-a2j), must("B joins", <-bj)
	if a2.resp.LeaderID != a2.resp.MemberID {
		t.Fatalf("leader %s, want A (%s)", a2.resp.LeaderID, a2.resp.MemberID)
	}
	// B syncs and waits for the leader; B's process is then replaced.
	bSync := sync(clB, "b", bm, false)
	took(syncs, "b")
	b2j := join(clB2, "b", "")
	took(joins, "b")
	if err := <-bSync; !errorIs(err, kerr.FencedInstanceID) {
		t.Fatalf("replaced member's sync: %v, want FENCED_INSTANCE_ID", err)
	}
	// A learns of the rebalance and joins it: both must get the next
	// generation at the capped deadline (3s).
	a3j := join(clA, "a", a2.resp.MemberID)
	took(joins, "a")
	a3 := must("A joins the rebalance", <-a3j)
	b2 := must("B's replacement joins", <-b2j)
	if a3.resp.Generation != b2.resp.Generation || a3.resp.Generation <= a2.resp.Generation {
		t.Fatalf("generations: A %d, B's replacement %d, want one generation after %d", a3.resp.Generation, b2.resp.Generation, a2.resp.Generation)
	}
}

func errorIs(err error, target *kerr.Error) bool {
	ke, ok := err.(*kerr.Error)
	return ok && ke == target
}
