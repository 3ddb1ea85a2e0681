package testutil

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// RecordsWriter writes task records as workers do: JSON lines in
// transactions.
type RecordsWriter struct {
	t  testing.TB
	cl *kgo.Client
}

// NewRecordsWriter returns a writer of task records to conn, with a
// transactional ID of the test's name; it closes when the test ends.
func NewRecordsWriter(t testing.TB, conn broker.Conn) *RecordsWriter {
	t.Helper()
	cl, err := conn.NewClient(kgo.TransactionalID("test-"+t.Name()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &RecordsWriter{t, cl}
}

// Write writes rs to the records topic of the first one's queue in one
// batch, in one transaction that commits or, with abort, aborts.
func (w *RecordsWriter) Write(abort bool, rs ...onceq.TaskRecord) {
	w.t.Helper()
	ctx := context.Background()
	if err := w.cl.BeginTransaction(); err != nil {
		w.t.Fatal(err)
	}
	var value []byte
	for _, r := range rs {
		value = append(r.AppendJSON(value), '\n')
	}
	if err := w.cl.ProduceSync(ctx, &kgo.Record{Topic: broker.RecordsTopic(rs[0].Queue), Key: []byte("q/0"), Value: value}).FirstErr(); err != nil {
		w.t.Fatal(err)
	}
	if err := w.cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
		w.t.Fatal(err)
	}
}

// Client is the writer's transactional client, for writes of other kinds.
func (w *RecordsWriter) Client() *kgo.Client { return w.cl }
