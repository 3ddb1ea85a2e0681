package broker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestMemberRefusesEverySettingAtOnce: NewMember names every setting it
// refuses in one error, as the worker's and the delay service's
// constructors do.
func TestMemberRefusesEverySettingAtOnce(t *testing.T) {
	_, err := broker.NewMember(broker.MemberConfig{Group: "a b", Protocol: "eager",
		SessionTimeout: 6 * time.Second, TransactionTimeout: 6 * time.Second})
	if !errors.Is(err, broker.ErrConfig) {
		t.Fatalf("error %v does not match ErrConfig", err)
	}
	var names []string
	for _, oe := range onceq.Options(err) {
		names = append(names, oe.Option)
	}
	slices.Sort(names)
	if want := []string{"Group", "GroupProtocol", "InstanceID", "TransactionTimeout"}; !slices.Equal(names, want) {
		t.Fatalf("refused %v, want %v: %v", names, want, err)
	}
	for _, want := range []string{`GroupProtocol "eager": use classic or consumer`, "TransactionTimeout 6s: want 1s or more and below the session timeout (6s)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// TestMemberHealthPhases walks a MemberHealth through Run's phases without
// a member: not started (healthy, not ready), running and not joined (not
// ready), stopped (neither, with the cause).
func TestMemberHealthPhases(t *testing.T) {
	h := broker.NewMemberHealth("x", "g", time.Minute)
	if err := h.Healthy(); err != nil {
		t.Fatalf("before Start: %v", err)
	}
	if err := h.Ready(nil); err == nil || err.Error() != "x: not started" {
		t.Fatalf("ready before Start: %v", err)
	}
	if !h.Start() || h.Start() {
		t.Fatal("Start: want true once, then false")
	}
	if err := h.Healthy(); err != nil {
		t.Fatalf("running: %v", err)
	}
	if err := h.Ready(nil); err == nil || err.Error() != "x: joining the group g" {
		t.Fatalf("ready before a join: %v", err)
	}
	if err := h.Ready(func() bool { return true }); err != nil {
		t.Fatalf("ready when the component says it joined: %v", err)
	}
	h.Stop(errors.New("boom"))
	if err := h.Healthy(); err == nil || err.Error() != "x: stopped: boom" {
		t.Fatalf("after Stop: %v", err)
	}
	if err := h.Ready(nil); err == nil || err.Error() != "x: stopped" {
		t.Fatalf("ready after Stop: %v", err)
	}
}

// TestMemberCommit runs a member of each protocol on the embedded broker:
// it joins (its health says so), a transaction writes a record and commits
// the offsets and metadata it was given instead of what was polled, and a
// transaction carrying the work of a partition the last sync did not
// assign aborts with ErrNotAssigned (classic: KIP-848 has no sync that
// says). Leave takes the member out of the group at once.
func TestMemberCommit(t *testing.T) {
	for _, protocol := range []string{broker.ClassicGroup, broker.ConsumerGroup} {
		t.Run(protocol, func(t *testing.T) {
			_, conn := testutil.StartBroker(t, "")
			testutil.CreateTopic(t, conn, "in", 2)
			testutil.CreateTopic(t, conn, "out", 1)
			produce(t, conn, "in", 10)
			adm, err := broker.NewAdmin(conn)
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			group := "g-" + protocol
			health := broker.NewMemberHealth("test", group, 6*time.Second)
			health.Start()
			m, err := broker.NewMember(broker.MemberConfig{Conn: conn, Group: group, InstanceID: "i1", Protocol: protocol,
				SessionTimeout: 6 * time.Second, TransactionTimeout: 3 * time.Second, Health: health,
				Opts: []kgo.Opt{kgo.ConsumeTopics("in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			committed := func() kadm.OffsetResponses {
				offs, err := adm.Kadm().FetchOffsets(kadm.RequireStable(ctx), group)
				if err != nil {
					t.Fatal(err)
				}
				return offs
			}
			for polled := 0; polled < 10; {
				fs := m.Poll(ctx, 100)
				if err := broker.FetchErr(fs); err != nil {
					t.Fatal(err)
				}
				polled += fs.NumRecords()
			}
			if err := health.Ready(nil); err != nil {
				t.Fatalf("records polled, yet: %v", err)
			}

			meta := "cursor"
			tx, err := m.Commit(ctx, []*kgo.Record{{Topic: "out", Value: []byte("moved")}},
				[]broker.TxnOffset{
					{Topic: "in", Partition: 1, At: kgo.EpochOffset{Epoch: -1, Offset: 1}},
					{Topic: "in", Partition: 0, At: kgo.EpochOffset{Epoch: -1, Offset: 2}, Metadata: &meta},
				}, nil, nil)
			if err != nil || !tx.Committed {
				t.Fatalf("commit: committed %v, %v", tx.Committed, err)
			}
			offs := committed()
			if o, _ := offs.Lookup("in", 0); o.At != 2 || o.Metadata != meta {
				t.Errorf("in/0: offset %d metadata %q, want 2 %q", o.At, o.Metadata, meta)
			}
			if o, _ := offs.Lookup("in", 1); o.At != 1 || o.Metadata == "" || o.Metadata == meta {
				t.Errorf("in/1: offset %d metadata %q, want 1 and the member's ID", o.At, o.Metadata)
			}

			if protocol == broker.ClassicGroup {
				tx, err = m.Commit(ctx, []*kgo.Record{{Topic: "out", Value: []byte("not moved")}},
					[]broker.TxnOffset{{Topic: "in", Partition: 0, At: kgo.EpochOffset{Epoch: -1, Offset: 9}}},
					map[string][]int32{"in": {7}}, nil)
				if !errors.Is(err, broker.ErrNotAssigned) || tx.Committed {
					t.Fatalf("commit with a partition not assigned: committed %v, %v", tx.Committed, err)
				}
				if o, _ := committed().Lookup("in", 0); o.At != 2 {
					t.Errorf("in/0 after the abort: offset %d, want 2", o.At)
				}
			}
			if recs := testutil.ReadCommitted(t, conn, 30*time.Second, "out"); len(recs) != 1 || string(recs[0].Value) != "moved" {
				t.Fatalf("out holds %d records, want the one committed", len(recs))
			}

			m.Leave(ctx, "test done")
			if protocol == broker.ClassicGroup {
				if n, err := adm.GroupMembers(ctx, group); err != nil || n != 0 {
					t.Fatalf("after Leave: %d members, %v", n, err)
				}
			}
		})
	}
}

// TestMemberAtLeastOnceRefusesCommit: a member without transactions has
// none to run.
func TestMemberAtLeastOnceRefusesCommit(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	m, err := broker.NewMember(broker.MemberConfig{Conn: conn, Group: "g", InstanceID: "i1", Protocol: broker.ClassicGroup,
		SessionTimeout: 6 * time.Second, TransactionTimeout: 3 * time.Second, AtLeastOnce: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Commit(context.Background(), nil, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "at-least-once") {
		t.Fatalf("Commit: %v", err)
	}
}

// produce writes n records to topic, spread over its partitions.
func produce(t *testing.T, conn broker.Conn, topic string, n int) {
	t.Helper()
	cl, err := conn.NewClient(kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte("v")}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestMemberCommitAfterUnheardRevocation: kgo's transact session passes
// a KIP-848 member the first revocation between two ends of a transaction
// and drops the next ones, and the member's epoch stays valid after it
// gives a partition up. A member that polled three partitions and had two
// of them taken, the second without a callback, must not commit the
// second one's offset (the brokers would accept it while its new owner
// runs the same records): Commit refuses it with a NotAssignedError that
// names it, and the group's offset of it stays uncommitted.
func TestMemberCommitAfterUnheardRevocation(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 3)
	testutil.CreateTopic(t, conn, "out", 1)
	produce(t, conn, "in", 30)
	const group = "unheard"
	var (
		mu      sync.Mutex
		heard   []int32              // what the first member's callbacks revoked
		holders = map[int32]string{} // the other members' assignments
	)
	member := func(id string) *broker.Member {
		m, err := broker.NewMember(broker.MemberConfig{Conn: conn, Group: group, InstanceID: id, Protocol: broker.ConsumerGroup,
			SessionTimeout: 6 * time.Second, TransactionTimeout: 3 * time.Second,
			Assigned: func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m["in"] {
					holders[p] = id
				}
			},
			Revoked: func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				if id == "a" {
					heard = append(heard, m["in"]...)
				}
			},
			Opts: []kgo.Opt{kgo.ConsumeTopics("in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := member("a")
	for polled := 0; polled < 30; {
		fs := a.Poll(ctx, 100)
		if err := broker.FetchErr(fs); err != nil {
			t.Fatal(err)
		}
		polled += fs.NumRecords()
	}
	// waitFor polls m (a member's client acts on its group as it polls)
	// until cond holds.
	waitFor := func(what string, cond func() bool, ms ...*broker.Member) {
		t.Helper()
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			}
			for _, m := range ms {
				pctx, pcancel := context.WithTimeout(ctx, 50*time.Millisecond)
				m.Poll(pctx, 10)
				pcancel()
			}
		}
	}
	others := func(ids ...string) bool {
		for _, id := range ids {
			if !slices.Contains(slices.Collect(maps.Values(holders)), id) {
				return false
			}
		}
		return true
	}
	b := member("b")
	waitFor("b to get a partition from a", func() bool { return len(heard) > 0 && others("b") }, a, b)
	c := member("c")
	waitFor("c to get a partition", func() bool { return others("b", "c") }, a, b, c)

	mu.Lock()
	var taken int32 = -1 // a partition c holds that a never heard it lost
	for p, id := range holders {
		if id == "c" && !slices.Contains(heard, p) {
			taken = p
		}
	}
	mu.Unlock()
	if taken < 0 {
		t.Skipf("a heard every revocation (%v): kgo passes them all now", heard)
	}
	offsets := []broker.TxnOffset{{Topic: "in", Partition: taken, At: kgo.EpochOffset{Epoch: -1, Offset: 5}}}
	// The first end after the revocation a heard aborts; the next one
	// would commit.
	for range 2 {
		tx, err := a.Commit(ctx, []*kgo.Record{{Topic: "out", Value: []byte("late")}}, offsets, nil, nil)
		if tx.Committed {
			t.Fatalf("a committed in/%d, which c holds", taken)
		}
		var gone *broker.NotAssignedError
		if errors.As(err, &gone) {
			if want := map[string][]int32{"in": {taken}}; !reflect.DeepEqual(gone.Partitions, want) {
				t.Fatalf("refused %v, want %v", gone.Partitions, want)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	offs, err := adm.Kadm().FetchOffsets(kadm.RequireStable(ctx), group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup("in", taken); ok && o.At >= 0 {
		t.Fatalf("in/%d committed at %d by a member that no longer held it", taken, o.At)
	}
	if recs := testutil.ReadCommitted(t, conn, 30*time.Second, "out"); len(recs) != 0 {
		t.Fatalf("out holds %d records of aborted transactions", len(recs))
	}
}
