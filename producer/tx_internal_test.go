package producer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestTxAbortedByTheClientIsAnError: franz-go's EndTransaction, asked to
// commit a transaction in which it marked no partition added although a
// produce was attempted, sends an abort instead and returns nil. A rare
// race in franz-go took that path for a transaction whose task had been
// acknowledged: "onceq dlq requeue" reported a requeue whose task then
// never became visible (TestDLQRequeueRunsOnce, about 1 run in 40 under
// stress). Here the path is reached on purpose, with a produce the broker
// refuses and the transaction's own error bookkeeping bypassed: commitTx
// must report ErrTxAborted, never a commit, and Tx must run fn again on a
// new client, whose transaction commits.
func TestTxAbortedByTheClientIsAnError(t *testing.T) {
	testutil.NeedsEmbedded(t, "refuses produce requests through the cluster's control hooks")
	p, conn, refuse, ctx := refusingProducer(t, kerr.InvalidRecord)
	task := onceq.Task{Queue: "jobs", ID: "t1"}
	task.Resolve(time.Now())
	// produce writes the task on the transaction's client directly, so
	// that Tx does not see the refused produce.
	produce := func(tx *Tx) (produceErr chan error) {
		produceErr = make(chan error, 1)
		tx.cl.Produce(ctx, task.Record("jobs"), func(_ *kgo.Record, err error) { produceErr <- err })
		return produceErr
	}

	refuse.Store(1)
	p.txMu.Lock()
	cl, err := p.txClient()
	if err == nil {
		err = cl.BeginTransaction()
	}
	if err != nil {
		p.txMu.Unlock()
		t.Fatal(err)
	}
	tx := &Tx{p: p, cl: cl, ctx: ctx}
	produced := produce(tx)
	err = p.commitTx(ctx, tx)
	p.txMu.Unlock()
	if perr := <-produced; !errors.Is(perr, kerr.InvalidRecord) {
		t.Fatalf("the produce ended with %v, want the injected INVALID_RECORD", perr)
	}
	if !errors.Is(err, ErrTxAborted) {
		t.Fatalf("commitTx = %v, want ErrTxAborted", err)
	}

	refuse.Store(1)
	runs := 0
	if err := p.Tx(ctx, func(tx *Tx) error {
		runs++
		<-produce(tx)
		return nil
	}); err != nil {
		t.Fatalf("Tx: %v", err)
	}
	checkRanTwiceVisibleOnce(t, conn, runs)
}

// TestTxOutOfOrderSequenceRunsAgain: a transactional produce refused with
// OUT_OF_ORDER_SEQUENCE_NUMBER leaves the client's sequence numbers out of
// step with the broker's. Tx aborts, makes a new client, whose
// initialization starts the sequences over, and runs fn again: the task
// is visible once.
func TestTxOutOfOrderSequenceRunsAgain(t *testing.T) {
	testutil.NeedsEmbedded(t, "refuses produce requests through the cluster's control hooks")
	p, conn, refuse, ctx := refusingProducer(t, kerr.OutOfOrderSequenceNumber)
	refuse.Store(1)
	runs := 0
	if err := p.Tx(ctx, func(tx *Tx) error {
		runs++
		return tx.Submit(onceq.Task{Queue: "jobs", ID: "t1"})
	}); err != nil {
		t.Fatalf("Tx: %v", err)
	}
	checkRanTwiceVisibleOnce(t, conn, runs)
}

// checkRanTwiceVisibleOnce checks that a Tx's fn ran twice, once aborted
// and once committed, and that the one task t1 it wrote to "jobs" is
// visible once.
func checkRanTwiceVisibleOnce(t *testing.T, conn broker.Conn, runs int) {
	t.Helper()
	if runs != 2 {
		t.Fatalf("fn ran %d times, want 2: once aborted, once committed", runs)
	}
	recs := testutil.ReadSettled(t, conn, 10*time.Second, "jobs")
	if len(recs) != 1 {
		t.Fatalf("%d records visible, want the one committed", len(recs))
	}
	if got, err := onceq.FromRecord(recs[0]); err != nil || got.ID != "t1" {
		t.Fatalf("visible: %+v, %v", got, err)
	}
}

// refusingProducer starts a broker with a topic "jobs" of one partition
// that answers the transactional produce requests with code, as many as
// the returned counter says, and a producer on it, closed when the test
// ends, with a context of 30 s.
func refusingProducer(t *testing.T, code *kerr.Error) (*Producer, broker.Conn, *atomic.Int64, context.Context) {
	emb, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "jobs", 1)
	c := emb.Cluster()
	refuse := new(atomic.Int64) // transactional produce requests still to refuse
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if req.TransactionID == nil || refuse.Add(-1) < 0 {
			return nil, nil, false
		}
		return testutil.ProduceError(req, code.Code), nil, true
	})
	p, err := New(Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return p, conn, refuse, ctx
}
