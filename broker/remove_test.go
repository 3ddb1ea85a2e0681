package broker_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestRemoveMember: a static member that died holding partitions and an
// open transaction (its client closed without leaving, as a process
// SIGKILLed leaves it) keeps both until its session times out, here a
// minute. RemoveMember aborts the transaction, so that the topic it wrote
// to is readable to its end, and takes the member out of the group, so
// that a member joining gets every partition at once.
func TestRemoveMember(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	testutil.CreateTopic(t, conn, "out", 1)
	const group, session = "removed", time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()

	// The member that dies: it joins, and its producer opens a
	// transaction that writes to out.
	dead, err := conn.NewClient(kgo.ConsumerGroup(group), kgo.InstanceID("dead"), kgo.ConsumeTopics("in"),
		kgo.SessionTimeout(session), kgo.Balancers(kgo.CooperativeStickyBalancer()))
	if err != nil {
		t.Fatal(err)
	}
	for {
		// On a fresh Apache Kafka cluster the group's coordinator may not
		// be available yet (COORDINATOR_NOT_AVAILABLE): not joined yet.
		if ids, err := adm.StaticMembers(ctx, group); err == nil && slices.Equal(ids, []string{"dead"}) {
			break
		}
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		dead.PollRecords(pctx, 1) // joins
		pcancel()
		if ctx.Err() != nil {
			t.Fatal("the member never joined")
		}
	}
	crashInTxn(ctx, t, conn, adm, broker.TransactionalID(group, "dead"))
	dead.Close() // a static member does not leave on close

	// A member joins: the group waits for the dead one's rejoin.
	var mu sync.Mutex
	var got []int32
	live, err := broker.NewMember(broker.MemberConfig{Conn: conn, Group: group, InstanceID: "live", Protocol: broker.ClassicGroup,
		SessionTimeout: session, TransactionTimeout: 10 * time.Second,
		Assigned: func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, m["in"]...)
		},
		Opts: []kgo.Opt{kgo.ConsumeTopics("in")}})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	go func() {
		for ctx.Err() == nil {
			live.Poll(ctx, 10)
		}
	}()
	for {
		if ids, err := adm.StaticMembers(ctx, group); err != nil {
			t.Fatal(err)
		} else if len(ids) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	removed := time.Now()
	if err := adm.RemoveMember(ctx, group, "dead", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	awaitTxnEnded(ctx, t, adm, removed, "RemoveMember")
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Since(removed) > session/2 {
			t.Fatalf("%v after RemoveMember, the member joined has partitions %v of in's 2", time.Since(removed), got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the member joined had both partitions %v after RemoveMember", time.Since(removed).Round(time.Millisecond))
	if ids, err := adm.StaticMembers(ctx, group); err != nil || !slices.Equal(ids, []string{"live"}) {
		t.Errorf("members after RemoveMember: %v, %v; want [live]", ids, err)
	}
	// Removing a member that is gone already is not an error.
	if err := adm.RemoveMember(ctx, group, "dead", 10*time.Second); err != nil {
		t.Errorf("removing the dead member again: %v", err)
	}
}

// openTxnGap returns how far out's last stable offset is short of its
// end.
func openTxnGap(ctx context.Context, t *testing.T, adm *broker.Admin) int64 {
	t.Helper()
	ends, err := adm.Kadm().ListEndOffsets(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	stable, err := adm.Kadm().ListCommittedOffsets(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	var gap int64
	ends.Each(func(e kadm.ListedOffset) {
		if s, ok := stable.Lookup(e.Topic, e.Partition); ok {
			gap += e.Offset - s.Offset
		}
	})
	return gap
}

// TestNewMemberFencesItsPredecessor: a member that crashed with a
// transaction open (its producer closed mid-transaction) leaves out
// unreadable past that transaction. A new member of its instance ID,
// which has nothing to commit, aborts that transaction as it starts: out
// is readable to its end soon after NewMember returns, long before the
// transaction's timeout.
func TestNewMemberFencesItsPredecessor(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	const group = "restarted"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	crashInTxn(ctx, t, conn, adm, broker.TransactionalID(group, "i1"))
	began := time.Now()
	m, err := broker.NewMember(broker.MemberConfig{Conn: conn, Group: group, InstanceID: "i1", Protocol: broker.ClassicGroup,
		SessionTimeout: 30 * time.Second, TransactionTimeout: 10 * time.Second, Opts: []kgo.Opt{kgo.ConsumeTopics("in")}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	awaitTxnEnded(ctx, t, adm, began, "NewMember began")
}

// crashInTxn writes a record to out in a transaction of txid, with a
// minute's timeout, and closes the producer without ending it, as a
// process SIGKILLed leaves it: out is unreadable past it.
func crashInTxn(ctx context.Context, t *testing.T, conn broker.Conn, adm *broker.Admin, txid string) {
	t.Helper()
	txn, err := conn.NewClient(kgo.TransactionalID(txid), kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic("out"))
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte("pending")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn.Close()
	if openTxnGap(ctx, t, adm) == 0 {
		t.Fatal("out's last stable offset is at its end: the crashed transaction is not open")
	}
}

// awaitTxnEnded waits until out is readable to its end, and fails the
// test if it is not within 15s since since (after), well short of the
// transaction's own timeout: the abort's marker may reach the partition
// a moment after the fencing answered.
func awaitTxnEnded(ctx context.Context, t *testing.T, adm *broker.Admin, since time.Time, after string) {
	t.Helper()
	for open := openTxnGap(ctx, t, adm); open != 0; open = openTxnGap(ctx, t, adm) {
		if time.Since(since) > 15*time.Second {
			t.Fatalf("%v after %s, out's last stable offset is %d short of its end: the crashed transaction is still open",
				time.Since(since).Round(time.Millisecond), after, open)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMemberClosesWhileFencing: a member whose brokers never answer is
// still initializing its producer in the background when it closes; Close
// ends that at once rather than after the transaction timeout (20s).
func TestMemberClosesWhileFencing(t *testing.T) {
	// A broker that takes connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	m, err := broker.NewMember(broker.MemberConfig{Conn: broker.Conn{Brokers: []string{ln.Addr().String()}}, Group: "g", InstanceID: "i1",
		Protocol: broker.ClassicGroup, SessionTimeout: 30 * time.Second, TransactionTimeout: 20 * time.Second,
		Opts: []kgo.Opt{kgo.ConsumeTopics("in")}})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	began := time.Now()
	go func() {
		m.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Close has not returned after %v: it waits for the fence at start", time.Since(began).Round(time.Millisecond))
	}
}
