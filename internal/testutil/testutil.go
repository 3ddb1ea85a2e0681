// Package testutil starts the real components tests run against: the
// embedded broker over TCP on loopback, or Apache Kafka when the
// environment asks for it (ONCEQ_TEST_KAFKA, see OnKafka), and readers that see a topic the way
// any read_committed Kafka consumer does. Nothing here is a mock.
package testutil

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
)

// StartBroker gives the test a broker: an embedded broker on a random
// loopback port, in memory (dataDir "") or persisted to dataDir, closed
// when the test ends. It has one node, or as many as ONCEQ_TEST_NODES
// says, whose partition leaders and coordinators move every
// ONCEQ_TEST_MOVE_LEADERS_EVERY if that is set: make test-crash-cluster
// runs the crash tests so.
//
// Under ONCEQ_TEST_KAFKA it is the test binary's Apache Kafka cluster
// instead (see OnKafka), and the embedded broker it returns is nil: a
// test that uses it says so first with NeedsEmbedded.
func StartBroker(t testing.TB, dataDir string) (*embedded.Broker, broker.Conn) {
	t.Helper()
	if OnKafka() {
		return nil, startKafka(t)
	}
	return StartEmbedded(t, dataDir)
}

// StartEmbedded is StartBroker on the embedded broker, whatever
// ONCEQ_TEST_KAFKA says: for the tests of the embedded broker itself.
func StartEmbedded(t testing.TB, dataDir string) (*embedded.Broker, broker.Conn) {
	t.Helper()
	cfg := embedded.Config{DataDir: dataDir}
	if v := os.Getenv("ONCEQ_TEST_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > embedded.MaxNodes {
			t.Fatalf("ONCEQ_TEST_NODES=%q: want 1 to %d", v, embedded.MaxNodes)
		}
		cfg.Nodes = n
	}
	if v := os.Getenv("ONCEQ_TEST_MOVE_LEADERS_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < embedded.MinMoveLeadersEvery {
			t.Fatalf("ONCEQ_TEST_MOVE_LEADERS_EVERY=%q: want a duration of at least %v", v, embedded.MinMoveLeadersEvery)
		}
		cfg.MoveLeadersEvery = d
	}
	emb, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("starting embedded broker: %v", err)
	}
	t.Cleanup(emb.Close)
	return emb, broker.Conn{Brokers: emb.Addrs()}
}

// CreateTopic creates a topic or fails the test. It returns once every
// partition answers a ListOffsets: Kafka's brokers learn of a topic a
// moment after CreateTopics returns, and until then answer requests for
// it with UNKNOWN_TOPIC_OR_PARTITION (the embedded broker, at once).
func CreateTopic(t testing.TB, conn broker.Conn, name string, partitions int32) {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, name, partitions, nil); err != nil {
		t.Fatalf("creating topic %s: %v", name, err)
	}
	for {
		listed, err := adm.Kadm().ListEndOffsets(ctx, name)
		if err == nil && listed.Error() == nil && len(listed[name]) == int(partitions) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s created, yet its %d partitions do not all answer: %v %v", name, partitions, err, listed.Error())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// awaitStable waits, up to markersWait, until every partition of topic
// has its last stable offset at its end: no transaction is open in it, or
// committed with its markers still on the way.
func awaitStable(ctx context.Context, conn broker.Conn, topic string) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return // the read reports the brokers' trouble
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(ctx, markersWait)
	defer cancel()
	for {
		info, err := adm.DescribeTopic(ctx, topic)
		if err != nil {
			return
		}
		stable := true
		for _, p := range info.Partitions {
			stable = stable && p.Stable >= p.End
		}
		if stable {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ReadCommitted reads every record of the topics visible to a fresh
// read_committed consumer, from the start to the last stable offset of each
// partition at the time of the call; a topic that does not exist holds
// nothing. It fails the test after timeout. A read right after the test's
// own commit wants ReadSettled.
func ReadCommitted(t testing.TB, conn broker.Conn, timeout time.Duration, topics ...string) []*kgo.Record {
	t.Helper()
	recs, err := ReadCommittedErr(conn, timeout, topics...)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// markersWait bounds how long ReadSettled waits for a topic's last
// stable offsets to reach its ends. Apache Kafka answers a transaction's
// commit (EndTxn) once the coordinator logged it, and writes the commit
// markers to the partitions after: a read right after a commit can find
// the last stable offset still below that transaction's records. A
// transaction left open on purpose (a crash test's) costs a read this
// wait, and its records are not read.
const markersWait = 3 * time.Second

// ReadSettled is ReadCommitted once every partition of the topics has its
// last stable offset at its end, or markersWait passed: the read sees the
// transactions that committed before the call, on Apache Kafka too.
func ReadSettled(t testing.TB, conn broker.Conn, timeout time.Duration, topics ...string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, topic := range topics {
		awaitStable(ctx, conn, topic)
	}
	return ReadCommitted(t, conn, timeout, topics...)
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
