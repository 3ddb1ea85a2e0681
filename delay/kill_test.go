package delay_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
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
		proc := testutil.Start(t, "delay", "--log-level", "debug", "--brokers", conn.Brokers[0], "--buckets", "100ms,500ms,2s",
			"--state-dir", state, "--metrics-addr", "", "--session-timeout", "6s", "--transaction-timeout", "4s")
		proc.WaitOutput(t, `partitions assigned`, time.Minute)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("onceq delay --state-dir %s:\n%s", state, proc.Output())
			}
		})
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
	procB := start(stateB)
	t.Cleanup(func() {
		if t.Failed() {
			procB.Signal(syscall.SIGQUIT)
			time.Sleep(time.Second)
		}
	})

	t.Cleanup(func() {
		if t.Failed() {
			dumpOffsets(t, conn)
		}
	})
	pub.wait(t, len(dues), 2*time.Minute)
	time.Sleep(500 * time.Millisecond)
	late := pub.verify(t, dues)
	if t.Failed() {
		dumpDuplicates(t, conn, pub, append(p.Topics(), "q"))
	}
	t.Logf("lateness p50 %v p99 %v max %v (the service was down for a while)",
		percentile(late, 0.5), percentile(late, 0.99), late[len(late)-1])
}

// dumpDuplicates logs every record, in the buckets and the queue, of the
// tasks published more than once.
func dumpDuplicates(t *testing.T, conn broker.Conn, pub *published, topics []string) {
	pub.mu.Lock()
	dup := map[string]bool{}
	for id, rs := range pub.recs {
		if len(rs) > 1 && len(dup) < 5 {
			dup[id] = true
		}
	}
	pub.mu.Unlock()
	for _, tp := range topics {
		for _, r := range testutil.ReadCommitted(t, conn, time.Minute, tp) {
			task, err := onceq.FromRecord(r)
			if err == nil && dup[task.ID] {
				t.Logf("%s: %s/%d/%d appended %s by producer %d/%d", task.ID, r.Topic, r.Partition, r.Offset, r.Timestamp.Format("15:04:05.000"), r.ProducerID, r.ProducerEpoch)
			}
		}
	}
}

// dumpOffsets logs the delay group's committed offsets and cursors against
// the buckets' end offsets.
func dumpOffsets(t *testing.T, conn broker.Conn) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Log(err)
		return
	}
	defer adm.Close()
	ctx := context.Background()
	offs, err := adm.Kadm().FetchOffsets(ctx, delay.DefaultGroup)
	if err != nil {
		t.Log(err)
		return
	}
	ends, _ := adm.Kadm().ListEndOffsets(ctx, shortLadder(t).Topics()...)
	stable, _ := adm.Kadm().ListCommittedOffsets(ctx, shortLadder(t).Topics()...)
	offs.Each(func(o kadm.OffsetResponse) {
		end, _ := ends.Lookup(o.Topic, o.Partition)
		lso, _ := stable.Lookup(o.Topic, o.Partition)
		t.Logf("%s/%d committed %d %q end %d stable %d", o.Topic, o.Partition, o.At, o.Metadata, end.Offset, lso.Offset)
	})
	txns, err := adm.Kadm().ListTransactions(ctx, nil, nil)
	t.Logf("transactions: %v", err)
	for _, tx := range txns.Sorted() {
		t.Logf("  %s producer %d state %s", tx.TxnID, tx.ProducerID, tx.State)
	}
	d, err := adm.Kadm().DescribeTransactions(ctx, txns.TransactionalIDs()...)
	t.Logf("describe transactions: %v", err)
	for _, tx := range d.Sorted() {
		t.Logf("  %s state %s started %d timeout %d topics %v err %v", tx.TxnID, tx.State, tx.StartTimestamp, tx.TimeoutMillis, tx.Topics, tx.Err)
	}
}
