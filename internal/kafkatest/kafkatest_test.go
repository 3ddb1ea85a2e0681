package kafkatest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/internal/kafkatest"
)

// start runs a cluster of n nodes for the test, or skips it unless
// ONCEQ_TEST_KAFKA is set: the launcher needs Java and, the first time,
// Maven and the network (make test-kafka sets it).
func start(t *testing.T, n int) *kafkatest.Cluster {
	t.Helper()
	if os.Getenv("ONCEQ_TEST_KAFKA") == "" {
		t.Skip("starts Apache Kafka: set ONCEQ_TEST_KAFKA=1 (make test-kafka)")
	}
	version := os.Getenv("ONCEQ_TEST_KAFKA_VERSION")
	began := time.Now()
	c, err := kafkatest.Start(context.Background(), kafkatest.Config{Dir: t.TempDir(), Nodes: n, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	t.Logf("Kafka %s, %d node(s) serving in %v: %v", c.Version(), n, time.Since(began).Round(time.Millisecond), c.Seeds())
	return c
}

// TestSingleNodeTransaction: one node takes a transactional record and a
// read_committed consumer reads it back.
func TestSingleNodeTransaction(t *testing.T) {
	c := start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	produceTxn(ctx, t, c.Seeds(), "t", "tx-single", "committed")
	if got := readCommitted(ctx, t, c.Seeds(), "t", 1); got[0] != "committed" {
		t.Fatalf("read %q, want the committed record", got)
	}
}

// TestThreeNodesKillRestart: a cluster of three takes transactions with
// one node SIGKILLed, and again once it is back; a fresh reader sees all.
func TestThreeNodesKillRestart(t *testing.T) {
	c := start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	produceTxn(ctx, t, c.Seeds(), "t", "tx-three", "before")
	pid := c.PID(2)
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	if c.PID(2) != 0 {
		t.Fatalf("node 2 (pid %d) still runs after Kill", pid)
	}
	produceTxn(ctx, t, c.Seeds(), "t", "tx-three", "while down")
	began := time.Now()
	if err := c.Restart(ctx, 2); err != nil {
		t.Fatal(err)
	}
	t.Logf("node 2 back in %v", time.Since(began).Round(time.Millisecond))
	if c.PID(2) == 0 || c.PID(2) == pid {
		t.Fatalf("node 2: pid %d after Restart (was %d)", c.PID(2), pid)
	}
	produceTxn(ctx, t, c.Seeds(), "t", "tx-three", "after")
	got := readCommitted(ctx, t, c.Seeds(), "t", 3)
	if fmt.Sprint(got) != "[before while down after]" {
		t.Fatalf("read %q, want the three committed records in order", got)
	}
}

// TestBadConfig: a config Start cannot run is refused before any JVM.
func TestBadConfig(t *testing.T) {
	for _, cfg := range []kafkatest.Config{
		{},
		{Dir: t.TempDir(), Nodes: kafkatest.MaxNodes + 1},
		{Dir: t.TempDir(), Version: "latest"},
		{Dir: t.TempDir(), Features: map[string]int{"transaction.version": -1}},
	} {
		if _, err := kafkatest.Start(context.Background(), cfg); err == nil {
			t.Errorf("Start(%+v): no error", cfg)
		}
	}
}

// produceTxn creates topic (one partition) if needed and commits value in
// one transaction of txnID.
func produceTxn(ctx context.Context, t *testing.T, seeds []string, topic, txnID, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic(topic), kgo.TransactionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, topic); err != nil && !isExists(err) {
		t.Fatalf("creating %s: %v", topic, err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatalf("producing %q: %v", value, err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("committing %q: %v", value, err)
	}
}

// readCommitted reads n records of topic with a fresh read_committed
// consumer.
func readCommitted(ctx context.Context, t *testing.T, seeds []string, topic string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %q, want %d records: %v", got, n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}

func isExists(err error) bool { return errors.Is(err, kerr.TopicAlreadyExists) }
