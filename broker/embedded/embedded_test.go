package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/internal/testutil"
)

// TestEmbeddedPersistence writes 10,000 records in transactions, restarts
// the broker on the same data dir and reads all of them back with
// read_committed.
func TestEmbeddedPersistence(t *testing.T) {
	const n = 10_000
	dir := t.TempDir()
	emb, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	conn := broker.Conn{Brokers: []string{emb.Addr()}}
	testutil.CreateTopic(t, conn, "persist", 4)
	clusterID := emb.ClusterID()

	cl, err := conn.NewClient(kgo.TransactionalID("persist-test"), kgo.DefaultProduceTopic("persist"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for batch := 0; batch < 10; batch++ {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n/10; i++ {
			id := batch*(n/10) + i
			cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint(id)), Value: []byte(fmt.Sprintf("v%d", id))}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	emb.Close()

	emb2, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer emb2.Close()
	if emb2.ClusterID() != clusterID {
		t.Fatalf("cluster ID changed across restart: %s then %s", clusterID, emb2.ClusterID())
	}
	checkReadBack(t, emb2, "persist", n)
}

// checkReadBack reads topic on emb with read_committed and checks it holds
// n records with distinct keys, each record's value "v" and its key.
func checkReadBack(t *testing.T, emb *embedded.Broker, topic string, n int) {
	t.Helper()
	recs := testutil.ReadCommitted(t, broker.Conn{Brokers: []string{emb.Addr()}}, time.Minute, topic)
	seen := make(map[string]bool, n)
	for _, r := range recs {
		if string(r.Value) != "v"+string(r.Key) {
			t.Fatalf("record %s has value %s", r.Key, r.Value)
		}
		seen[string(r.Key)] = true
	}
	if len(recs) != n || len(seen) != n {
		t.Fatalf("read %d records (%d distinct) after restart, want %d", len(recs), len(seen), n)
	}
}

func TestEmbeddedDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	emb, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = embedded.Start(embedded.Config{DataDir: dir})
	if !errors.Is(err, embedded.ErrDataDirInUse) {
		t.Fatalf("second broker on one data dir: got %v, want ErrDataDirInUse", err)
	}
	emb.Close()
	emb2, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("data dir not released by Close: %v", err)
	}
	emb2.Close()
}

func TestEmbeddedBadListen(t *testing.T) {
	for _, addr := range []string{"nope", "127.0.0.1:x", "127.0.0.1:70000"} {
		if _, err := embedded.Start(embedded.Config{Listen: addr}); !errors.Is(err, broker.ErrConfig) {
			t.Errorf("listen %q: got %v, want ErrConfig", addr, err)
		}
	}
}
