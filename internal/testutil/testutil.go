// Package testutil starts the real components tests run against: the
// embedded broker over TCP on loopback, and readers that see a topic the way
// any read_committed Kafka consumer does. Nothing here is a mock.
package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// StartBroker starts an embedded broker on a random loopback port, in
// memory (dataDir "") or persisted to dataDir, and closes it when the test
// ends.
func StartBroker(t testing.TB, dataDir string) (*broker.Embedded, broker.Conn) {
	t.Helper()
	emb, err := broker.StartEmbedded(broker.EmbeddedConfig{DataDir: dataDir})
	if err != nil {
		t.Fatalf("starting embedded broker: %v", err)
	}
	t.Cleanup(emb.Close)
	return emb, broker.Conn{Brokers: []string{emb.Addr()}}
}

// CreateTopic creates a topic or fails the test.
func CreateTopic(t testing.TB, conn broker.Conn, name string, partitions int32) {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, name, partitions, nil); err != nil {
		t.Fatalf("creating topic %s: %v", name, err)
	}
}

// ReadCommitted reads every record of the topics visible to a fresh
// read_committed consumer, from the start to the last stable offset of each
// partition at the time of the call. It fails the test after timeout.
func ReadCommitted(t testing.TB, conn broker.Conn, timeout time.Duration, topics ...string) []*kgo.Record {
	t.Helper()
	recs, err := ReadCommittedErr(conn, timeout, topics...)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// ReadCommittedErr is ReadCommitted returning an error instead of failing.
func ReadCommittedErr(conn broker.Conn, timeout time.Duration, topics ...string) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return nil, err
	}
	ends, err := adm.Kadm().ListCommittedOffsets(ctx, topics...)
	adm.Close()
	if err != nil {
		return nil, err
	}
	want := map[string]map[int32]int64{}
	remaining := 0
	ends.Each(func(o kadmListedOffset) {
		if o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = map[int32]int64{}
			}
			want[o.Topic][o.Partition] = o.Offset
			remaining++
		}
	})
	cl, err := conn.NewClient(
		kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Control records (transaction markers) are delivered so that a
		// partition whose stable end is a marker is seen to be finished.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for remaining > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset == end-1 {
				remaining--
			}
		})
	}
	return out, nil
}

type kadmListedOffset = kadm.ListedOffset
