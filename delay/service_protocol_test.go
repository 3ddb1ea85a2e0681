package delay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
)

// TestConsumerGroupProtocol runs the service with KIP-848's group protocol
// (GroupProtocol, as the worker's): a first instance moves delayed tasks,
// a second joins the broker-assigned group while they flow and the first
// leaves; every task is still published exactly once and none early.
func TestConsumerGroupProtocol(t *testing.T) {
	const n = 1_000
	_, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	createQueue(t, conn, "q", 4)
	pub := watchQueue(t, conn, "q")
	adm := kadm.NewClient(pub.cl)
	// members counts the instances in the group as a KIP-848 group; -1:
	// there is no such group.
	members := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gs, err := adm.DescribeConsumerGroups(ctx, delay.DefaultGroup)
		if g, ok := gs[delay.DefaultGroup]; err == nil && ok && g.Err == nil {
			return len(g.Members)
		}
		return -1
	}
	opts := func(id string) []delay.ServiceOpt {
		return []delay.ServiceOpt{delay.Conn(conn), delay.WithPlanner(p), delay.Logger(testLogger()), delay.InstanceID(id),
			delay.GroupProtocol(broker.ConsumerGroup), delay.SessionTimeout(6 * time.Second), delay.TransactionTimeout(4 * time.Second)}
	}
	stopA := runService(t, opts("a")...)
	dues := submitSpread(t, conn, p, "q", n, 4*time.Second, seeded(t))
	waitFor(t, time.Minute, "a quarter published", func() bool { return pub.published() >= n/4 })
	runService(t, opts("b")...)
	waitFor(t, time.Minute, "two members of the KIP-848 group", func() bool { return members() == 2 })
	stopA()
	t.Logf("a left; %d published", pub.published())
	pub.wait(t, len(dues), time.Minute)
	// Once nothing waits in the buckets no move is left to commit: the
	// queue read to its end then holds every duplicate there is.
	waitFor(t, time.Minute, "nothing waiting in the buckets", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := delay.Stats(ctx, conn, p, delay.DefaultGroup)
		for _, b := range st {
			if b.Waiting > 0 || !b.Exact {
				return false
			}
		}
		return err == nil
	})
	if recs := testutil.ReadCommitted(t, conn, time.Minute, "q"); len(recs) != n {
		t.Errorf("the queue holds %d records, want %d", len(recs), n)
	}
	pub.verify(t, dues)
	if got := members(); got != 1 {
		t.Errorf("%d members after a left, want 1", got)
	}
}

// TestGroupProtocolRefused: a group protocol that is neither classic nor
// consumer is refused by name, with the others refused at once.
func TestGroupProtocolRefused(t *testing.T) {
	_, err := delay.NewService(delay.GroupProtocol("eager"), delay.MaxHeld(0))
	if !errors.Is(err, delay.ErrServiceConfig) {
		t.Fatalf("error %v does not match ErrServiceConfig", err)
	}
	var names []string
	for _, oe := range onceq.Options(err) {
		names = append(names, oe.Option)
	}
	if strings.Join(names, ",") != "GroupProtocol,MaxHeld" || !strings.Contains(err.Error(), `GroupProtocol "eager": use classic or consumer`) {
		t.Fatalf("refused %v: %v", names, err)
	}
}
