// Package testutil starts the real components tests run against: the
// embedded broker over TCP on loopback, and readers that see a topic the way
// any read_committed Kafka consumer does. Nothing here is a mock.
package testutil

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
)

// StartBroker starts an embedded broker on a random loopback port, in
// memory (dataDir "") or persisted to dataDir, and closes it when the test
// ends.
func StartBroker(t testing.TB, dataDir string) (*embedded.Broker, broker.Conn) {
	t.Helper()
	emb, err := embedded.Start(embedded.Config{DataDir: dataDir})
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
// partition at the time of the call; a topic that does not exist holds
// nothing. It fails the test after timeout.
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
	var out []*kgo.Record
	for _, topic := range topics {
		err := broker.ReadCommitted(ctx, conn, topic, func(r *kgo.Record) error {
			out = append(out, r)
			return nil
		})
		if err != nil && !errors.Is(err, broker.ErrTopicNotFound) { // a topic not made yet holds nothing
			return out, err
		}
	}
	return out, nil
}
