package producer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// written returns how many records (committed, aborted or open, markers
// included) the topic's partitions hold: proof that an aborted
// transaction did write before it aborted.
func written(t *testing.T, conn broker.Conn, topic string) int64 {
	t.Helper()
	info, err := describe(conn, topic)
	if err != nil {
		t.Fatal(err)
	}
	return info.Records()
}

// submitN submits n tasks in tx, one of them delayed, and returns their IDs.
func submitN(t *testing.T, tx *producer.Tx, prefix string, n int) []string {
	var ids []string
	for i := 0; i < n; i++ {
		task := onceq.Task{Queue: "jobs", ID: fmt.Sprintf("%s-%d", prefix, i), Payload: []byte("p")}
		if i == 0 {
			task.Delay = time.Minute
		}
		if err := tx.Submit(task); err != nil {
			t.Error(err)
		}
		ids = append(ids, task.ID)
	}
	return ids
}

func visibleIDs(t *testing.T, conn broker.Conn) map[string]bool {
	seen := map[string]bool{}
	for _, task := range readTasks(t, conn, "jobs", "onceq-delay-30s") {
		if seen[task.ID] {
			t.Fatalf("task %s visible twice", task.ID)
		}
		seen[task.ID] = true
	}
	return seen
}

func TestTxCommit(t *testing.T) {
	conn, p := setup(t, []string{"jobs"})
	ctx := ctxT(t)
	var ids []string
	var receipts []producer.Receipt
	err := p.Tx(ctx, func(tx *producer.Tx) error {
		ids = submitN(t, tx, "c", 200)
		var err error
		receipts, err = tx.Receipts(ctx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(receipts) != len(ids) || receipts[0].Topic != "onceq-delay-30s" || !receipts[0].Delayed || receipts[1].Topic != "jobs" || receipts[1].Offset < 0 {
		t.Fatalf("receipts %+v...", receipts[:2])
	}
	seen := visibleIDs(t, conn)
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("committed task %s is not visible", id)
		}
	}
	if len(seen) != len(ids) {
		t.Fatalf("%d tasks visible, want %d", len(seen), len(ids))
	}
}

// TestTxAbort checks every way a transaction aborts: nothing it submitted
// is ever visible to read_committed readers, though it was written, and
// the producer's next transaction commits normally.
func TestTxAbort(t *testing.T) {
	conn, p := setup(t, []string{"jobs"})
	ctx := ctxT(t)
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name string
		run  func() error
		want error
	}{
		{"fn error", func() error {
			return p.Tx(ctx, func(tx *producer.Tx) error {
				submitN(t, tx, "e", 100)
				if _, err := tx.Receipts(ctx); err != nil { // written, not committed
					return err
				}
				return errBoom
			})
		}, errBoom},
		{"ctx canceled", func() error {
			cctx, cancel := context.WithCancel(ctx)
			return p.Tx(cctx, func(tx *producer.Tx) error {
				submitN(t, tx, "x", 100)
				if _, err := tx.Receipts(ctx); err != nil {
					return err
				}
				cancel()
				return nil
			})
		}, context.Canceled},
		{"invalid task", func() error {
			return p.Tx(ctx, func(tx *producer.Tx) error {
				submitN(t, tx, "i", 10)
				return tx.Submit(onceq.Task{Queue: "jobs", ID: "bad id"})
			})
		}, onceq.ErrInvalidID},
		{"panic", func() (err error) {
			defer func() {
				if r := recover(); r != errBoom {
					t.Errorf("recovered %v, want the panic to propagate", r)
				}
				err = errBoom
			}()
			return p.Tx(ctx, func(tx *producer.Tx) error {
				submitN(t, tx, "p", 10)
				panic(errBoom)
			})
		}, errBoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(); !errors.Is(err, tc.want) {
				t.Fatalf("Tx: %v, want %v", err, tc.want)
			}
		})
	}
	if n := written(t, conn, "jobs"); n < 100 {
		t.Fatalf("jobs holds %d records: the aborted transactions did not write", n)
	}
	var committed []string
	if err := p.Tx(ctx, func(tx *producer.Tx) error {
		committed = submitN(t, tx, "ok", 5)
		return nil
	}); err != nil {
		t.Fatalf("Tx after aborted ones: %v", err)
	}
	if _, err := p.Submit(ctx, onceq.Task{Queue: "jobs", ID: "plain"}); err != nil {
		t.Fatal(err)
	}
	seen := visibleIDs(t, conn)
	want := append(committed, "plain")
	if len(seen) != len(want) {
		t.Fatalf("visible tasks %v, want only %v", seen, want)
	}
	for _, id := range want {
		if !seen[id] {
			t.Fatalf("task %s not visible", id)
		}
	}
}

func TestTxSubmitAfterEnd(t *testing.T) {
	_, p := setup(t, []string{"jobs"})
	var leaked *producer.Tx
	if err := p.Tx(ctxT(t), func(tx *producer.Tx) error { leaked = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := leaked.Submit(onceq.Task{Queue: "jobs"}); err == nil {
		t.Fatal("Submit on an ended transaction succeeded")
	}
}

// TestTxConcurrent runs transactions from several goroutines at once: they
// take turns, and each commits all of its tasks.
func TestTxConcurrent(t *testing.T) {
	conn, p := setup(t, []string{"jobs"})
	ctx := ctxT(t)
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			errs <- p.Tx(ctx, func(tx *producer.Tx) error {
				for i := 0; i < 50; i++ {
					if err := tx.Submit(onceq.Task{Queue: "jobs", ID: fmt.Sprintf("g%d-%d", g, i)}); err != nil {
						return err
					}
				}
				return nil
			})
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ReadSettled(t, conn, 20*time.Second, "jobs"); len(got) != 200 {
		t.Fatalf("%d tasks visible, want 200", len(got))
	}
}

// TestTxCrash kills (SIGKILL) a process in the middle of a transaction
// whose tasks are written: none of them ever becomes visible. With a random
// transactional ID the broker aborts the transaction after TxTimeout; a
// producer restarted with the crashed one's stable ID fences it at once.
func TestTxCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	for _, tc := range []struct {
		name string
		txID string // empty: random
	}{{"timeout", ""}, {"fenced by restart", "crash-tx"}} {
		t.Run(tc.name, func(t *testing.T) {
			conn, _ := setup(t, []string{"jobs"})
			cmd := exec.Command(os.Args[0], "-test.run=^TestTxCrashChild$")
			cmd.Env = append(os.Environ(), "ONCEQ_CRASH_BROKER="+conn.Brokers[0], "ONCEQ_CRASH_TXID="+tc.txID)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "written\n" {
				cmd.Process.Kill()
				t.Fatalf("child said %q (%v)", line, err)
			}
			if n := written(t, conn, "jobs"); n < 100 {
				t.Fatalf("jobs holds %d records, want the child's 100 written", n)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			ctx := ctxT(t)
			want := map[string]bool{}
			if tc.txID != "" {
				p, err := producer.New(producer.Conn(conn), producer.TransactionalID(tc.txID))
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				if err := p.Tx(ctx, func(tx *producer.Tx) error { return tx.Submit(onceq.Task{Queue: "jobs", ID: "after"}) }); err != nil {
					t.Fatal(err)
				}
				want["after"] = true
			}
			// Read once every transaction has settled: the fenced one's
			// abort may land after the new producer's commit returns.
			waitStable(t, conn, "jobs")
			seen := visibleIDs(t, conn)
			if len(seen) != len(want) || (len(want) > 0 && !seen["after"]) {
				t.Fatalf("visible after the crash: %v, want %v", seen, want)
			}
		})
	}
}

// TestTxCrashChild is the process TestTxCrash kills.
func TestTxCrashChild(t *testing.T) {
	addr := os.Getenv("ONCEQ_CRASH_BROKER")
	if addr == "" {
		t.Skip("run by TestTxCrash")
	}
	opts := []producer.Opt{producer.Brokers(addr), producer.TxTimeout(time.Second)}
	if id := os.Getenv("ONCEQ_CRASH_TXID"); id != "" {
		opts = append(opts, producer.TransactionalID(id), producer.TxTimeout(time.Minute))
	}
	p, err := producer.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_ = p.Tx(ctx, func(tx *producer.Tx) error {
		for i := 0; i < 100; i++ {
			if err := tx.Submit(onceq.Task{Queue: "jobs", ID: fmt.Sprintf("crash-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Receipts(ctx); err != nil {
			t.Fatal(err)
		}
		fmt.Println("written")
		select {} // until killed
	})
}

// waitStable waits until every partition's last stable offset reaches its
// end: no transaction is open on the topic.
func waitStable(t *testing.T, conn broker.Conn, topic string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := describe(conn, topic)
		if err != nil {
			t.Fatal(err)
		}
		open := false
		for _, p := range info.Partitions {
			open = open || p.Stable < p.End
		}
		if !open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a transaction is still open on %s: %+v", topic, info.Partitions)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describe(conn broker.Conn, topic string) (broker.TopicInfo, error) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return broker.TopicInfo{}, err
	}
	defer adm.Close()
	return adm.DescribeTopic(context.Background(), topic)
}
