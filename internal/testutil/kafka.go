package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/kafkatest"
)

// Tests run on Apache Kafka instead of the embedded broker when the
// environment says so (make test-kafka):
//
//	ONCEQ_TEST_KAFKA=1 (or 3)          a cluster of that many nodes
//	ONCEQ_TEST_KAFKA_VERSION=4.0.0     its version (default kafkatest.DefaultVersion)
//	ONCEQ_TEST_KAFKA_TXN_VERSION=1     transaction.version (1, or 2: 4.x's default)
//	ONCEQ_TEST_KAFKA_FEATURES=k=v,...  other feature levels, e.g. group.version=0
//
// One cluster serves a whole test binary: the first StartBroker starts
// it, and its nodes die with the binary. The tests of a package run one
// at a time, so each gets the cluster to itself: when a test that called
// StartBroker ends, every topic and group it left is deleted (after its
// transactions end and its groups' members are removed), and the next
// test may use the same names afresh.

// OnKafka reports whether the tests run on Apache Kafka
// (ONCEQ_TEST_KAFKA).
func OnKafka() bool { return os.Getenv("ONCEQ_TEST_KAFKA") != "" }

// NeedsEmbedded skips t on Apache Kafka: t needs what only the embedded
// broker has, which why names (fault injection through the cluster's
// control hooks, leader moves on demand, a broker process to restart).
func NeedsEmbedded(t testing.TB, why string) {
	t.Helper()
	if OnKafka() {
		t.Skipf("needs the embedded broker: %s", why)
	}
}

var (
	kafkaOnce    sync.Once
	kafkaCluster *kafkatest.Cluster
	kafkaErr     error
)

// startKafka is StartBroker on Apache Kafka: the shared cluster, which
// the end of t leaves with no topic and no group.
func startKafka(t testing.TB) broker.Conn {
	t.Helper()
	kafkaOnce.Do(func() { kafkaCluster, kafkaErr = startSharedKafka() })
	if kafkaErr != nil {
		t.Fatalf("starting Apache Kafka (ONCEQ_TEST_KAFKA): %v", kafkaErr)
	}
	conn := broker.Conn{Brokers: kafkaCluster.Seeds()}
	t.Cleanup(func() {
		if err := resetKafka(conn); err != nil {
			t.Errorf("clearing Kafka for the next test: %v", err)
		}
	})
	return conn
}

// KafkaCluster is the shared Apache Kafka cluster, for tests that kill
// and restart its nodes; nil unless a StartBroker on Kafka started it.
func KafkaCluster() *kafkatest.Cluster { return kafkaCluster }

func startSharedKafka() (*kafkatest.Cluster, error) {
	cfg := kafkatest.Config{Version: os.Getenv("ONCEQ_TEST_KAFKA_VERSION")}
	v := os.Getenv("ONCEQ_TEST_KAFKA")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > kafkatest.MaxNodes {
		return nil, fmt.Errorf("ONCEQ_TEST_KAFKA=%q: want the number of nodes, 1 or 3", v)
	}
	cfg.Nodes = n
	features := os.Getenv("ONCEQ_TEST_KAFKA_FEATURES")
	if tv := os.Getenv("ONCEQ_TEST_KAFKA_TXN_VERSION"); tv != "" {
		features = strings.Trim(features+",transaction.version="+tv, ",")
	}
	for _, kv := range strings.Split(features, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		level, err := strconv.Atoi(v)
		if !ok || err != nil {
			return nil, fmt.Errorf("feature %q (ONCEQ_TEST_KAFKA_FEATURES or _TXN_VERSION): want name=level, for example transaction.version=1", kv)
		}
		if cfg.Features == nil {
			cfg.Features = map[string]int{}
		}
		cfg.Features[k] = level
	}
	sweepKafkaDirs()
	if cfg.Dir, err = os.MkdirTemp("", fmt.Sprintf("onceq-kafka-test-%d-", os.Getpid())); err != nil {
		return nil, err
	}
	return kafkatest.Start(context.Background(), cfg)
}

// sweepKafkaDirs removes the cluster directories of test binaries that
// have ended: a binary cannot remove its own at exit without a TestMain.
func sweepKafkaDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "onceq-kafka-test-*"))
	for _, dir := range dirs {
		f := strings.Split(filepath.Base(dir), "-")
		if len(f) < 4 {
			continue
		}
		pid, err := strconv.Atoi(f[3])
		if err == nil && pid != os.Getpid() && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// resetKafka leaves the cluster as a test found it: it waits for open
// transactions to end (a killed worker's abort at its timeout), removes
// every group's members and deletes the groups, then deletes every topic
// but Kafka's own and waits until the metadata shows none of them.
func resetKafka(conn broker.Conn) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(conn.Brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := waitTxnsEnded(ctx, adm); err != nil {
		return err
	}
	if err := deleteGroups(ctx, cl, adm); err != nil {
		return err
	}
	return deleteTopics(ctx, adm)
}

func waitTxnsEnded(ctx context.Context, adm *kadm.Client) error {
	for {
		open, err := adm.ListTransactions(ctx, nil, []string{"Ongoing", "PrepareCommit", "PrepareAbort"})
		if err == nil && len(open) == 0 {
			return nil
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("transactions still open: %v (%v)", open.TransactionalIDs(), err)
		}
	}
}

func deleteGroups(ctx context.Context, cl *kgo.Client, adm *kadm.Client) error {
	for {
		listed, err := adm.ListGroups(ctx)
		if err == nil && len(listed) == 0 {
			return nil
		}
		if err == nil {
			groups := listed.Groups()
			deleted, _ := adm.DeleteGroups(ctx, groups...)
			for _, g := range groups {
				if r, ok := deleted[g]; ok && errors.Is(r.Err, kerr.NonEmptyGroup) {
					evictMembers(ctx, cl, adm, g, listed[g].GroupType)
				}
			}
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("groups left: %v", listed.Groups())
		}
	}
}

// evictMembers removes the members of group that a test's processes left
// behind (killed, or stopped without leaving): a classic group's by
// LeaveGroup, a KIP-848 group's by a leaving heartbeat in their name.
func evictMembers(ctx context.Context, cl *kgo.Client, adm *kadm.Client, group, groupType string) {
	if groupType == "consumer" {
		described, err := adm.DescribeConsumerGroups(ctx, group)
		if err != nil {
			return
		}
		for _, m := range described[group].Members {
			req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
			req.Group, req.MemberID, req.MemberEpoch, req.InstanceID = group, m.MemberID, -1, m.InstanceID
			_, _ = req.RequestWith(ctx, cl)
		}
		return
	}
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for _, m := range described[group].Members {
		rm := kmsg.NewLeaveGroupRequestMember()
		rm.MemberID, rm.InstanceID = m.MemberID, m.InstanceID
		req.Members = append(req.Members, rm)
	}
	if len(req.Members) > 0 {
		_, _ = req.RequestWith(ctx, cl)
	}
}

func deleteTopics(ctx context.Context, adm *kadm.Client) error {
	for {
		td, err := adm.ListTopics(ctx)
		if err == nil && len(td.Names()) == 0 {
			return nil
		}
		if err == nil {
			_, _ = adm.DeleteTopics(ctx, td.Names()...)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("topics left: %v", td.Names())
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
