package testutil

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// RecordsWriter writes task records as workers do: JSON lines in
// transactions.
type RecordsWriter struct {
	t       testing.TB
	conn    broker.Conn
	cl      *kgo.Client
	aborted atomic.Bool // franz-go aborted a commit (see broker.TxLogger)
}

// NewRecordsWriter returns a writer of task records to conn, with a
// transactional ID of the test's name; it closes when the test ends.
func NewRecordsWriter(t testing.TB, conn broker.Conn) *RecordsWriter {
	t.Helper()
	w := &RecordsWriter{t: t, conn: conn}
	w.dial()
	t.Cleanup(func() { w.cl.Close() })
	return w
}

// dial makes the writer's transactional client, fencing the one before.
func (w *RecordsWriter) dial() {
	w.t.Helper()
	cl, err := w.conn.NewClient(kgo.TransactionalID("test-"+w.t.Name()), kgo.ProducerLinger(0),
		kgo.WithLogger(broker.TxLogger(slog.New(slog.DiscardHandler), &w.aborted)))
	if err != nil {
		w.t.Fatal(err)
	}
	if w.cl != nil {
		w.cl.Close()
	}
	w.cl = cl
}

// Write writes rs to the records topic of the first one's queue in one
// batch, in one transaction that commits or, with abort, aborts.
func (w *RecordsWriter) Write(abort bool, rs ...onceq.TaskRecord) {
	w.t.Helper()
	var value []byte
	for _, r := range rs {
		value = append(r.AppendJSON(value), '\n')
	}
	w.Commit(abort, &kgo.Record{Topic: broker.RecordsTopic(rs[0].Queue), Key: []byte("q/0"), Value: value})
}

// Commit writes recs in one transaction that commits or, with abort,
// aborts, and returns the offset of the first. A commit that franz-go
// turns into an abort of its own is written again, on a new client.
func (w *RecordsWriter) Commit(abort bool, recs ...*kgo.Record) int64 {
	w.t.Helper()
	ctx := context.Background()
	for try := 1; ; try++ {
		if err := w.cl.BeginTransaction(); err != nil {
			w.t.Fatal(err)
		}
		if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			w.t.Fatal(err)
		}
		w.aborted.Store(false)
		if err := w.cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			w.t.Fatal(err)
		}
		if abort || !w.aborted.Load() {
			return recs[0].Offset
		}
		if try == 3 {
			w.t.Fatal("franz-go aborted the transaction 3 times, asked to commit")
		}
		w.t.Logf("franz-go aborted a transaction asked to commit (see broker.TxLogger): writing it again")
		w.dial()
	}
}
