package broker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestReadFenced: every committed record of every partition is read up to
// the fences, an aborted one is not, and a second read sees the first
// read's fences but not its own.
func TestReadFenced(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "t", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := conn.NewClient(kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, v := range []string{"a", "b", "c"} {
		if err := p.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := conn.NewClient(kgo.DefaultProduceTopic("t"), kgo.TransactionalID("aborted"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte("aborted")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	read := func(fence string) []string {
		var got []string
		err := broker.ReadFenced(ctx, conn, "t", func(int32) *kgo.Record {
			return &kgo.Record{Value: []byte(fence)}
		}, func(r *kgo.Record) error {
			got = append(got, string(r.Value))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	if got, want := read("fence 1"), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("first read: %q, want %q", got, want)
	}
	if got, want := read("fence 2"), []string{"a", "b", "c", "fence 1", "fence 1"}; !slices.Equal(got, want) {
		t.Errorf("second read: %q, want %q", got, want)
	}
	if err := broker.ReadFenced(ctx, conn, "missing", nil, nil); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Errorf("a missing topic: %v, want ErrTopicNotFound", err)
	}
}
