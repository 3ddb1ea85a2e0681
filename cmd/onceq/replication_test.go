package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceq/onceq/broker"
)

// TestReplicationFlagsRefused: --replication-factor and
// --min-insync-replicas values no cluster could take exit 2 before
// anything connects, naming the flag and what it wants, from the command
// line and from the environment alike.
func TestReplicationFlagsRefused(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		args []string
		env  string // ONCEQ_REPLICATION_FACTOR
		want string
	}{
		{[]string{"--replication-factor", "0"}, "", "--replication-factor 0: want -1 (the brokers' default.replication.factor) or 1 to 32767"},
		{[]string{"--replication-factor", "-2"}, "", "--replication-factor -2: want -1"},
		{[]string{"--replication-factor", "40000"}, "", "--replication-factor 40000: want -1"},
		{nil, "0", "--replication-factor 0: want -1"},
		{[]string{"--min-insync-replicas", "-1"}, "", "--min-insync-replicas -1: want 0 (the brokers' min.insync.replicas) or 1 to the replication factor"},
		{[]string{"--replication-factor", "3", "--min-insync-replicas", "4"}, "", "--min-insync-replicas 4 is more than --replication-factor 3, so every write would fail: want 1 to 3"},
		{[]string{"--replication-factor", "three"}, "", `invalid argument "three" for "--replication-factor"`},
	} {
		t.Setenv("ONCEQ_REPLICATION_FACTOR", tc.env)
		args := append([]string{"topics", "create", "emails"}, tc.args...)
		code, _, errOut := runCLI(t, "", args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v (env %q): exit %d, %q; want exit 2 saying %q", tc.args, tc.env, code, errOut, tc.want)
		}
	}
}

// TestReplicationFlagsOnThreeBrokers: onceq topics create on a cluster of
// three brokers refuses one replica (exit 2, with why and the fix), takes
// it with --allow-single-replica, and creates what --replication-factor
// and --min-insync-replicas ask for.
func TestReplicationFlagsOnThreeBrokers(t *testing.T) {
	clearEnv(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := "--brokers=" + strings.Join(c.ListenAddrs(), ",")

	code, _, errOut := runCLI(t, "", "topics", "create", "emails", brokers, "--replication-factor", "1")
	for _, w := range []string{"replication factor 1", "3 brokers", "loses its records", "--replication-factor 3", "--allow-single-replica"} {
		if code != exitUsage || !strings.Contains(errOut, w) {
			t.Errorf("RF 1 on 3 brokers: exit %d, %q; want exit 2 saying %q", code, errOut, w)
		}
	}
	if code, _, errOut := runCLI(t, "", "topics", "create", "emails", brokers, "--replication-factor", "1", "--allow-single-replica"); code != exitOK {
		t.Fatalf("RF 1 with --allow-single-replica: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "", "topics", "create", "sms", brokers, "--replication-factor", "3", "--min-insync-replicas", "2"); code != exitOK {
		t.Fatalf("RF 3, min.insync 2: exit %d: %s", code, errOut)
	}

	adm, err := broker.NewAdmin(broker.Conn{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := adm.Kadm().ListTopics(ctx, "emails", "sms")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]int{"emails": 1, "sms": 3} {
		for _, p := range details[topic].Partitions {
			if len(p.Replicas) != want {
				t.Errorf("%s partition %d: %d replicas, want %d", topic, p.Partition, len(p.Replicas), want)
			}
		}
	}
	info, err := adm.DescribeTopic(ctx, "sms")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Configs["min.insync.replicas"]; got != "2" {
		t.Errorf("sms: min.insync.replicas=%q, want 2 (configs %v)", got, info.Configs)
	}
}
