package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// startCluster starts a kfake cluster of n brokers over TCP on loopback
// with the given broker configs: the embedded broker has one node, and
// the replication checks need several.
func startCluster(t *testing.T, n int, configs map[string]string) []string {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(n)}
	if configs != nil {
		opts = append(opts, kfake.BrokerConfigs(configs))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// replicas reads back, with kadm, how many replicas each partition of
// topic has, and fails unless they all have the same number.
func replicas(t *testing.T, adm *broker.Admin, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := adm.Kadm().ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := details[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		t.Fatalf("topic %s: %v (found %v)", topic, d.Err, ok)
	}
	n := -1
	for _, p := range d.Partitions {
		if n >= 0 && len(p.Replicas) != n {
			t.Fatalf("topic %s: partitions with %d and %d replicas", topic, n, len(p.Replicas))
		}
		n = len(p.Replicas)
	}
	return n
}

// ensure creates the specs and a queue as onceq's creators do: the
// catalogue's topics with EnsureTopics, a user's queue with CreateTopic.
func ensure(adm *broker.Admin, queue string, specs ...broker.TopicSpec) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.EnsureTopics(ctx, specs); err != nil {
		return err
	}
	return adm.CreateTopic(ctx, queue, 2, nil)
}

// TestReplicationOnThreeBrokers: --replication-factor 3 and
// --min-insync-replicas 2 reach every topic created, onceq's own and a
// queue, and a topic whose configs set min.insync.replicas keeps its own.
func TestReplicationOnThreeBrokers(t *testing.T) {
	conn := broker.Conn{Brokers: startCluster(t, 3, nil), Replication: broker.Replication{Factor: 3, MinInsyncReplicas: 2}}
	adm := newAdmin(t, conn)
	own := []broker.TopicSpec{broker.ChangelogSpec("mailer", "emails", 2), broker.WakeSpec(), broker.TableSpec(broker.ControlTopic)}
	if err := ensure(adm, "emails", own...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, "sms", 1, map[string]string{"min.insync.replicas": "3"}); err != nil {
		t.Fatal(err)
	}
	names := []string{"emails", "sms"}
	for _, s := range own {
		names = append(names, s.Name)
	}
	_, configs := topicConfigs(t, adm, names...)
	for _, n := range names {
		if got := replicas(t, adm, n); got != 3 {
			t.Errorf("%s: %d replicas, want 3", n, got)
		}
		want := "2"
		if n == "sms" {
			want = "3"
		}
		if got := configs[n]["min.insync.replicas"]; got != want {
			t.Errorf("%s: min.insync.replicas=%q, want %q (configs %v)", n, got, want, configs[n])
		}
	}
	if got := configs[broker.WakeTopic]["retention.ms"]; got != "3600000" {
		t.Errorf("%s: retention.ms=%q: the catalogue's configs were lost", broker.WakeTopic, got)
	}
}

// TestSingleReplicaRefused: one replica on a cluster of three brokers,
// asked for (--replication-factor 1) or by default (the brokers'
// default.replication.factor is 1), is refused before anything is
// created, with why and how to fix it; --allow-single-replica creates it.
func TestSingleReplicaRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		factor  int16
		configs map[string]string
		wants   []string
	}{
		{"explicit", 1, nil, []string{"replication factor 1 (--replication-factor)", "--replication-factor 3", "--allow-single-replica"}},
		{"broker default", -1, map[string]string{"default.replication.factor": "1"},
			[]string{"default.replication.factor (1)", "--replication-factor 3", "set default.replication.factor=3 on the brokers", "--allow-single-replica"}},
		{"zero is the default", 0, map[string]string{"default.replication.factor": "1"}, []string{"default.replication.factor (1)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := startCluster(t, 3, tc.configs)
			conn := broker.Conn{Brokers: addrs, Replication: broker.Replication{Factor: tc.factor}}
			adm := newAdmin(t, conn)
			spec := broker.ChangelogSpec("mailer", "emails", 2)
			err := ensure(adm, "emails", spec)
			if !errors.Is(err, broker.ErrSingleReplica) {
				t.Fatalf("EnsureTopics: %v, want ErrSingleReplica", err)
			}
			for _, w := range append(tc.wants, "3 brokers", "loses its records", spec.Name) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %v", w, err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := adm.CreateTopic(ctx, "emails", 2, nil); !errors.Is(err, broker.ErrSingleReplica) || !strings.Contains(err.Error(), `topic "emails"`) {
				t.Fatalf("CreateTopic: %v, want ErrSingleReplica naming the topic", err)
			}
			if counts, err := adm.PartitionCounts(ctx, spec.Name, "emails"); err != nil || len(counts) != 0 {
				t.Fatalf("refused topics exist: %v, %v", counts, err)
			}

			conn.Replication.AllowSingleReplica = true
			forced := newAdmin(t, conn)
			if err := ensure(forced, "emails", spec); err != nil {
				t.Fatalf("with AllowSingleReplica: %v", err)
			}
			if tc.factor == 1 { // kfake gives -1 min(3, brokers) replicas, whatever its default
				for _, n := range []string{spec.Name, "emails"} {
					if got := replicas(t, forced, n); got != 1 {
						t.Errorf("%s: %d replicas, want 1", n, got)
					}
				}
			}
		})
	}
}

// TestBrokerDefaultReplication: with the brokers' default.replication.factor
// above 1 the default is taken as it is, and min.insync.replicas is
// checked against it.
func TestBrokerDefaultReplication(t *testing.T) {
	addrs := startCluster(t, 3, map[string]string{"default.replication.factor": "2"})
	adm := newAdmin(t, broker.Conn{Brokers: addrs})
	if err := ensure(adm, "emails", broker.WakeSpec()); err != nil {
		t.Fatal(err)
	}
	tooMany := newAdmin(t, broker.Conn{Brokers: addrs, Replication: broker.Replication{MinInsyncReplicas: 3}})
	err := ensure(tooMany, "sms")
	if !errors.Is(err, broker.ErrConfig) || !strings.Contains(err.Error(), "min.insync.replicas=3 is more than the 2 replicas") {
		t.Fatalf("min.insync.replicas 3 over a default of 2: %v", err)
	}
}

// TestDefaultReplicationWithABrokerDown: a broker that went down after an
// Admin counted the brokers does not keep it from creating topics with
// the brokers' default.replication.factor, read from the others. Kafka
// lists a broker that died until the controller fences it, seconds later,
// and the first node killed in TestCrashKafkaNodeKills stopped the
// worker's workflow service in that window: its DescribeConfigs to the
// dead node failed the whole read.
func TestDefaultReplicationWithABrokerDown(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.BrokerConfigs(map[string]string{"default.replication.factor": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	adm := newAdmin(t, broker.Conn{Brokers: c.ListenAddrs()})
	if n, err := broker.CountBrokers(t.Context(), adm); err != nil || n != 3 {
		t.Fatalf("counted %d brokers (%v), want 3", n, err)
	}
	if err := c.RemoveNode(0); err != nil { // kfake's controller, the last node, stays
		t.Fatal(err)
	}
	if err := ensure(adm, "emails", broker.WakeSpec()); err != nil {
		t.Fatal(err)
	}
}

// TestSingleBrokerReplication: on one broker (the embedded broker, a
// laptop) one replica is all there is: the default and an explicit 1
// create topics without complaint.
func TestSingleBrokerReplication(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	if err := ensure(newAdmin(t, conn), "emails", broker.WakeSpec()); err != nil {
		t.Fatal(err)
	}
	conn.Replication.Factor = 1
	adm := newAdmin(t, conn)
	if err := ensure(adm, "sms", broker.TableSpec(broker.ControlTopic)); err != nil {
		t.Fatal(err)
	}
	if got := replicas(t, adm, "sms"); got != 1 {
		t.Errorf("sms: %d replicas, want 1", got)
	}
}

// TestReplicationValidate: Conn.Validate refuses replication settings
// that no cluster could take, naming the flag and the fix.
func TestReplicationValidate(t *testing.T) {
	for _, tc := range []struct {
		r    broker.Replication
		want string // "" for valid
	}{
		{broker.Replication{}, ""},
		{broker.Replication{Factor: -1, MinInsyncReplicas: 2}, ""},
		{broker.Replication{Factor: 3, MinInsyncReplicas: 2}, ""},
		{broker.Replication{Factor: 3, MinInsyncReplicas: 3}, ""},
		{broker.Replication{Factor: -2}, "--replication-factor -2: want -1"},
		{broker.Replication{MinInsyncReplicas: -1}, "--min-insync-replicas -1: want 0"},
		{broker.Replication{Factor: 3, MinInsyncReplicas: 4}, "--min-insync-replicas 4 is more than --replication-factor 3"},
	} {
		err := broker.Conn{Replication: tc.r}.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.r, err)
		case tc.want != "" && (!errors.Is(err, broker.ErrConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want ErrConfig saying %q", tc.r, err, tc.want)
		}
	}
}
