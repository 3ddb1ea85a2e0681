package bench

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestReadCommittedAfterCrashAbortedTail pins why the verifier reads up to
// fences it writes: a broker SIGKILLed with a transaction open aborts it
// when it restarts without writing an abort marker, so the partition's
// last stable offset lies past records no read_committed consumer ever
// receives. A reader waiting for a record at that offset minus one would
// wait forever.
func TestReadCommittedAfterCrashAbortedTail(t *testing.T) {
	addr, dir := testutil.FreeAddr(t), t.TempDir()
	brk, _ := testutil.StartBrokerProcess(t, addr, dir)
	conn := broker.Conn{Brokers: []string{addr}}
	testutil.CreateTopic(t, conn, "t", 1)
	ctx := context.Background()
	p, err := conn.NewClient(kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("committed")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.NewClient(kgo.DefaultProduceTopic("t"), kgo.TransactionalID("open"), kgo.TransactionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("in flight")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	brk.Kill()
	testutil.StartBrokerProcess(t, addr, dir)

	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var got []string
	if err := readCommitted(rctx, conn, "t", func(r *kgo.Record) {
		got = append(got, string(r.Value))
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "committed" {
		t.Fatalf("read %q, want only the committed record", got)
	}
}
