package embedded_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
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
	first := embedded.FirstBatchSize(raw)
	if first == 0 || first == len(raw) {
		t.Fatalf("partition 1 should hold a data batch and a marker (%d bytes)", len(raw))
	}
	for name, size := range map[string]int{"0.dat": first, "0.idx": embedded.IndexEntrySize} {
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
func startInProcess(t *testing.T, dir, listen string, logs *testutil.SyncBuffer) (*embedded.Broker, broker.Conn) {
	t.Helper()
	cfg := embedded.Config{DataDir: dir, Listen: listen}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	emb, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	return emb, broker.Conn{Brokers: []string{emb.Addr()}}
}

// TestRecoverAppliesOffsetsOfCutCommit kills the broker, as far as its
// data dir goes, in the middle of committing a transaction that commits a
// group's offset, and restarts it. The embedded broker writes the commit
// markers first and the group's offsets after them:
//
//   - cut after the first marker (partition 0 holds it, partition 1 none),
//     the records and the offset must both be committed: before, the
//     group's offset stayed behind the records, and a worker ran their
//     tasks again;
//   - cut before any marker, neither is: the transaction is aborted.
func TestRecoverAppliesOffsetsOfCutCommit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cut     []string // partitions whose marker the kill cut
		records []string
		offset  int64 // -1: none
		log     string
	}{
		{"after the first marker", []string{"t-1"}, []string{"0@0", "1@1"}, 42, "commit_markers=1 abort_markers=0 producers_fenced=1 sequences_restored=2 offsets_restored=1"},
		{"before the markers", []string{"t-0", "t-1"}, nil, -1, "commit_markers=0 abort_markers=2 producers_fenced=1 sequences_restored=2 offsets_restored=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			emb, conn := startInProcess(t, dir, "", nil)
			testutil.CreateTopic(t, conn, "t", 2)
			cl := txClient(t, emb.Addr(), "x")
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := produceIn(cl, "0@0", "1@1"); err != nil {
				t.Fatal(err)
			}
			txnOffsetCommit(t, cl, "x", "g", "t", 0, 42)
			if err := commitTx(cl); err != nil {
				t.Fatal(err)
			}

			// The data dir as the kill leaves it.
			crash := t.TempDir()
			copyDir(t, dir, crash)
			dropGroupCommits(t, filepath.Join(crash, "groups.log"), "g")
			for _, part := range tc.cut {
				pdir := filepath.Join(crash, "partitions", part)
				raw, err := os.ReadFile(filepath.Join(pdir, "0.dat"))
				if err != nil {
					t.Fatal(err)
				}
				first := embedded.FirstBatchSize(raw)
				if first == 0 || first == len(raw) {
					t.Fatalf("partition %s should hold a data batch and a marker (%d bytes)", part, len(raw))
				}
				for name, size := range map[string]int{"0.dat": first, "0.idx": embedded.IndexEntrySize} {
					if err := os.Truncate(filepath.Join(pdir, name), int64(size)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := os.WriteFile(filepath.Join(crash, "onceq.lock"), []byte("1\n"), 0o644); err != nil {
				t.Fatal(err)
			}

			var logs testutil.SyncBuffer
			_, conn = startInProcess(t, crash, "", &logs)
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("want the recovery logged with %s; logs:\n%s", tc.log, logs.String())
			}
			if got := committedValues(t, conn); !slices.Equal(got, tc.records) {
				t.Fatalf("read_committed sees %q, want %q", got, tc.records)
			}
			adm, err := broker.NewAdmin(conn)
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			offs, err := adm.Kadm().FetchOffsets(t.Context(), "g")
			if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
				t.Fatal(err)
			}
			o, ok := offs.Lookup("t", 0)
			if tc.offset < 0 && ok && o.At >= 0 || tc.offset >= 0 && (!ok || o.At != tc.offset) {
				t.Fatalf("group g's offset of t/0 after the restart: %+v (found %v), want %d", o, ok, tc.offset)
			}
		})
	}
}

// txnOffsetCommit commits group's offset of topic's partition in cl's open
// transaction, as an admin commit (no member, generation -1).
func txnOffsetCommit(t *testing.T, cl *kgo.Client, txid, group, topic string, part int32, offset int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch, req.Generation = txid, group, pid, epoch, -1
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	topics, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rt.TopicID = topics[topic].ID
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = part, offset, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("TxnOffsetCommit %s/%d: %v", rt.Topic, rp.Partition, err)
			}
		}
	}
}

// copyDir copies the files under src to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// dropGroupCommits removes group's commit entries from a groups.log
// (framed as [length][crc][version][JSON], little-endian).
func dropGroupCommits(t *testing.T, path, group string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept []byte
	dropped := 0
	for pos := 0; pos+10 <= len(raw); {
		end := pos + 8 + int(binary.LittleEndian.Uint32(raw[pos:pos+4]))
		if end > len(raw) {
			break
		}
		var e struct {
			Type  string `json:"type"`
			Group string `json:"g"`
		}
		if json.Unmarshal(raw[pos+10:end], &e) == nil && e.Type == "commit" && e.Group == group {
			dropped++
		} else {
			kept = append(kept, raw[pos:end]...)
		}
		pos = end
	}
	if dropped == 0 {
		t.Fatalf("%s holds no commit of group %s", path, group)
	}
	if err := os.WriteFile(path, kept, 0o644); err != nil {
		t.Fatal(err)
	}
}
