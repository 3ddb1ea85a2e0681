package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestKilledBrokerFinishesOpenTransactions SIGKILLs the broker process
// while transactions are open. Before the data dir recovery, the broker
// treated them as aborted without writing markers: the next transaction
// the same producer committed in a partition was dropped by read_committed
// readers, and after a second kill the aborted records came back. Now the
// open transactions are aborted with markers, the producers that held them
// are fenced, and both kills leave exactly the committed records.
func TestKilledBrokerFinishesOpenTransactions(t *testing.T) {
	dir := t.TempDir()
	bp, addr := testutil.StartBrokerProcess(t, "", dir)
	conn := broker.Conn{Brokers: []string{addr}}
	testutil.CreateTopic(t, conn, "t", 2)

	a := txClient(t, addr, "a")
	mustTx(t, a, true, "c1@0")
	mustTx(t, a, false, "a1@0", "a2@0", "a3@1")
	survivor := txClient(t, addr, "f")
	mustTx(t, survivor, false, "f1@0")

	bp.Kill()
	bp, _ = testutil.StartBrokerProcess(t, addr, dir)
	if out := bp.Output(); !strings.Contains(out, "abort_markers=3") || !strings.Contains(out, "producers_fenced=2") {
		t.Errorf("the restarted broker should report 3 abort markers and 2 fenced producers; it printed:\n%s", out)
	}
	// The survivor goes on with the transaction the crash aborted, at its
	// old epoch: it must not commit.
	perr := produceIn(survivor, "f2@0")
	if cerr := commitTx(survivor); perr == nil && cerr == nil {
		t.Error("a producer whose transaction the crash aborted committed it at its old epoch; want it fenced")
	} else {
		t.Logf("the survivor was refused: produce %v, commit %v", perr, cerr)
	}
	a.Close()
	mustTx(t, txClient(t, addr, "a"), true, "b1@0", "b2@1")

	want := []string{"b1@0", "b2@1", "c1@0"}
	if got := committedValues(t, conn); !slices.Equal(got, want) {
		t.Fatalf("after one kill read_committed sees %v, want %v", got, want)
	}
	bp.Kill()
	testutil.StartBrokerProcess(t, addr, dir)
	if got := committedValues(t, conn); !slices.Equal(got, want) {
		t.Fatalf("after a second kill read_committed sees %v, want %v", got, want)
	}
}

func txClient(t *testing.T, addr, txid string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(txid), kgo.DefaultProduceTopic("t"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(3), kgo.RetryTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceTx begins a transaction, produces values "v@partition" in it and
// commits it or leaves it open.
func produceTx(cl *kgo.Client, commit bool, vals ...string) error {
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	if err := produceIn(cl, vals...); err != nil || !commit {
		return err
	}
	return commitTx(cl)
}

// produceIn produces values "v@partition" in the open transaction.
func produceIn(cl *kgo.Client, vals ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, v := range vals {
		var p int32
		fmt.Sscanf(v[strings.IndexByte(v, '@')+1:], "%d", &p)
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Partition: p}).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

func commitTx(cl *kgo.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.EndTransaction(ctx, kgo.TryCommit)
}

func mustTx(t *testing.T, cl *kgo.Client, commit bool, vals ...string) {
	t.Helper()
	if err := produceTx(cl, commit, vals...); err != nil {
		t.Fatalf("transaction %v: %v", vals, err)
	}
}

func committedValues(t *testing.T, conn broker.Conn) []string {
	t.Helper()
	var got []string
	for _, r := range testutil.ReadCommitted(t, conn, 20*time.Second, "t") {
		got = append(got, string(r.Value))
	}
	slices.Sort(got)
	return got
}

// TestRecoverCompletesTornCommitOnTheBroker cuts a committed transaction's
// marker off one of its two partitions, as a kill in the middle of the
// broker's commit leaves it, and restarts the broker: the transaction is
// committed whole.
func TestRecoverCompletesTornCommitOnTheBroker(t *testing.T) {
	dir := t.TempDir()
	emb, conn := startInProcess(t, dir, "", nil)
	testutil.CreateTopic(t, conn, "t", 2)
	mustTx(t, txClient(t, emb.Addr(), "x"), true, "0@0", "1@1")
	emb.Close()

	// Cut partition 1's commit marker and its index entry; leave the lock
	// file as a killed broker leaves it.
	pdir := filepath.Join(dir, "partitions", "t-1")
	raw, err := os.ReadFile(filepath.Join(pdir, "0.dat"))
	if err != nil {
		t.Fatal(err)
	}
	first := broker.FirstBatchSize(raw)
	if first == 0 || first == len(raw) {
		t.Fatalf("partition 1 should hold a data batch and a marker (%d bytes)", len(raw))
	}
	for name, size := range map[string]int{"0.dat": first, "0.idx": broker.IndexEntrySize} {
		if err := os.Truncate(filepath.Join(pdir, name), int64(size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "onceq.lock"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var logs testutil.SyncBuffer
	_, conn = startInProcess(t, dir, "", &logs)
	if !strings.Contains(logs.String(), "commit_markers=1") {
		t.Errorf("want the recovery logged with one commit marker; logs:\n%s", logs.String())
	}
	if got := committedValues(t, conn); !slices.Equal(got, []string{"0@0", "1@1"}) {
		t.Fatalf("read_committed sees %q, want both records of the committed transaction", got)
	}
}

// TestCleanRestartKeepsOpenTransactions stops the broker cleanly while a
// transaction is open: the restart must not take it for a crash's, and the
// producer commits it afterwards.
func TestCleanRestartKeepsOpenTransactions(t *testing.T) {
	dir := t.TempDir()
	emb, conn := startInProcess(t, dir, "", nil)
	testutil.CreateTopic(t, conn, "t", 1)
	cl := txClient(t, emb.Addr(), "x")
	mustTx(t, cl, false, "open@0")
	emb.Close()

	var logs testutil.SyncBuffer
	startInProcess(t, dir, emb.Addr(), &logs)
	if strings.Contains(logs.String(), "completed its open transactions") {
		t.Errorf("a clean restart ran the crash recovery:\n%s", logs.String())
	}
	if err := commitTx(cl); err != nil {
		t.Fatalf("committing the transaction open across a clean restart: %v", err)
	}
	if got := committedValues(t, conn); !slices.Equal(got, []string{"open@0"}) {
		t.Fatalf("read_committed sees %q, want the transaction committed after the restart", got)
	}
}

// startInProcess starts an embedded broker on dir, listening on listen
// (empty: a free port), logging warnings to logs if not nil.
func startInProcess(t *testing.T, dir, listen string, logs *testutil.SyncBuffer) (*broker.Embedded, broker.Conn) {
	t.Helper()
	cfg := broker.EmbeddedConfig{DataDir: dir, Listen: listen}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	emb, err := broker.StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	return emb, broker.Conn{Brokers: []string{emb.Addr()}}
}
