package broker_test

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// topicConfigs reads back the partitions of topics and the configs set on
// them (not the brokers' defaults) with kadm, as any Kafka client would.
func topicConfigs(t *testing.T, adm *broker.Admin, topics ...string) (map[string]int, map[string]map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	details, err := adm.Kadm().ListTopics(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string]int{}
	for _, d := range details {
		if d.Err == nil {
			parts[d.Topic] = len(d.Partitions)
		}
	}
	rcs, err := adm.Kadm().DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string]map[string]string{}
	for _, rc := range rcs {
		if rc.Err != nil {
			t.Fatalf("configs of %s: %v", rc.Name, rc.Err)
		}
		configs[rc.Name] = map[string]string{}
		for _, c := range rc.Configs {
			if c.Source == 1 && c.Value != nil { // set on the topic
				configs[rc.Name][c.Key] = *c.Value
			}
		}
	}
	return parts, configs
}

func newAdmin(t *testing.T, conn broker.Conn) *broker.Admin {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	return adm
}

// TestCatalogTopics creates one topic of every kind from the catalogue,
// as each creator does, and reads back their partitions and configs: the
// names, partitions and configs onceq's topics have always had.
func TestCatalogTopics(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	adm := newAdmin(t, conn)
	day7 := strconv.FormatInt((7 * 24 * time.Hour).Milliseconds(), 10)
	for _, tc := range []struct {
		spec       broker.TopicSpec
		kind       broker.Kind
		byName     bool // TopicSpecOf(name) gives the spec
		partitions int
		configs    map[string]string
	}{
		{broker.BucketSpec(broker.DelayTopic(30 * time.Second)), broker.KindBuckets, true, 8, map[string]string{"message.timestamp.type": "LogAppendTime"}},
		{broker.DeadLettersSpec(broker.DLQTopic("emails")), broker.KindDeadLetters, true, 1, map[string]string{}},
		{broker.DeadLettersSpec(broker.DLQTopic(broker.DelayTopic(time.Second))), broker.KindDeadLetters, true, 1, map[string]string{}},
		{broker.RecordsSpec("emails", 3, 0), broker.KindRecords, false, 3, map[string]string{"cleanup.policy": "delete", "retention.ms": day7}},
		{broker.ChangelogSpec("mailer", "emails", 3), broker.KindChangelog, false, 3, map[string]string{"cleanup.policy": "compact"}},
		{broker.WakeSpec(), broker.KindWake, true, 1, map[string]string{"cleanup.policy": "delete", "retention.ms": "3600000", "segment.ms": "600000"}},
		{broker.WorkflowSpec(), broker.KindWorkflow, true, 8, map[string]string{}},
		{broker.TableSpec(broker.ControlTopic), broker.KindControl, true, 1, map[string]string{"cleanup.policy": "compact"}},
		{broker.TableSpec(broker.LadderTopic), broker.KindLadder, true, 1, map[string]string{"cleanup.policy": "compact"}},
		{broker.TableSpec(broker.PeriodicTopic), broker.KindPeriodic, true, 1, map[string]string{"cleanup.policy": "compact"}},
		{broker.TableSpec(broker.TokensTopic), broker.KindTokens, true, 1, map[string]string{"cleanup.policy": "compact"}},
		{broker.LimitsSpec(), broker.KindLimits, true, 1, map[string]string{"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}},
		{broker.LeasesSpec("pull", 5*time.Minute), broker.KindLeases, false, 1, map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "600000"}},
	} {
		name := tc.spec.Name
		if k := broker.KindOf(name); k != tc.kind {
			t.Errorf("KindOf(%s) = %v, want %v", name, k, tc.kind)
		}
		spec, ok := broker.TopicSpecOf(name)
		if ok != tc.byName || ok && (spec.Partitions != tc.spec.Partitions || !maps.Equal(spec.Configs, tc.spec.Configs)) {
			t.Errorf("TopicSpecOf(%s) = %+v, %v; want %+v, %v", name, spec, ok, tc.spec, tc.byName)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		counts, err := adm.EnsureTopics(ctx, []broker.TopicSpec{tc.spec})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if counts[name] != int32(tc.partitions) {
			t.Errorf("%s: EnsureTopics counts %d partitions, want %d", name, counts[name], tc.partitions)
		}
		parts, configs := topicConfigs(t, adm, name)
		if parts[name] != tc.partitions || !maps.Equal(configs[name], tc.configs) {
			t.Errorf("%s (%v): %d partitions, configs %v; want %d, %v", name, tc.kind, parts[name], configs[name], tc.partitions, tc.configs)
		}
	}
	for _, name := range []string{"emails", "onceq-", "onceq-delay-", "onceq-leases-", "__consumer_offsets"} {
		if k := broker.KindOf(name); k != broker.KindNotOwn {
			t.Errorf("KindOf(%q) = %v, want %v", name, k, broker.KindNotOwn)
		}
		if spec, ok := broker.TopicSpecOf(name); ok {
			t.Errorf("TopicSpecOf(%q) = %+v, want none", name, spec)
		}
	}
}

// TestRecordsRetentionWhoeverCreatesFirst pins the rule of a records
// topic's retention: it keeps records for the longest any of its writers
// needs, whichever created it. A producer creating it first with the
// default 7 days used to leave a worker that needs 30 days with 7.
func TestRecordsRetentionWhoeverCreatesFirst(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	adm := newAdmin(t, conn)
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	const day = 24 * time.Hour
	ensure := func(specs ...broker.TopicSpec) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.EnsureTopics(ctx, specs); err != nil {
			t.Fatal(err)
		}
	}
	retention := func(queue string) string {
		t.Helper()
		name := broker.RecordsTopic(queue)
		_, configs := topicConfigs(t, adm, name)
		return configs[name]["retention.ms"]
	}

	// The producer first (DefaultRecordsRetention), then a worker that
	// needs 30 days: raised.
	ensure(broker.RecordsSpec("a", 2, broker.DefaultRecordsRetention))
	if got := retention("a"); got != ms(7*day) {
		t.Fatalf("created by the producer: retention.ms=%s, want %s", got, ms(7*day))
	}
	ensure(broker.RecordsSpec("a", 2, 30*day))
	if got := retention("a"); got != ms(30*day) {
		t.Fatalf("then ensured by a worker that needs 30 days: retention.ms=%s, want %s", got, ms(30*day))
	}
	// The other order ends the same.
	ensure(broker.RecordsSpec("b", 2, 30*day))
	ensure(broker.RecordsSpec("b", 2, broker.DefaultRecordsRetention))
	if got := retention("b"); got != ms(30*day) {
		t.Fatalf("created by the worker, then the producer: retention.ms=%s, want %s", got, ms(30*day))
	}
	// Never lowered: a writer needing less, a topic kept for ever.
	ensure(broker.RecordsSpec("a", 2, day))
	if got := retention("a"); got != ms(30*day) {
		t.Fatalf("after a writer needing a day: retention.ms=%s, want %s", got, ms(30*day))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	forever := "-1"
	if err := adm.CreateTopic(ctx, broker.RecordsTopic("c"), 1, map[string]string{"retention.ms": forever}); err != nil {
		t.Fatal(err)
	}
	// Several topics at once, each raised to what its writer needs.
	ensure(broker.RecordsSpec("c", 1, 30*day), broker.RecordsSpec("d", 1, 0), broker.RecordsSpec("a", 2, 60*day), broker.RecordsSpec("b", 2, 60*day))
	for q, want := range map[string]string{"a": ms(60 * day), "b": ms(60 * day), "c": forever, "d": ms(7 * day)} {
		if got := retention(q); got != want {
			t.Errorf("queue %s: retention.ms=%s, want %s", q, got, want)
		}
	}
	// A spec that does not raise leaves a shorter topic as it is.
	plain := broker.RecordsSpec("e", 1, day)
	plain.RaiseRetention = false
	ensure(plain)
	plain.Configs = broker.RecordsSpec("e", 1, 30*day).Configs
	ensure(plain)
	if got := retention("e"); got != ms(day) {
		t.Errorf("without RaiseRetention: retention.ms=%s, want %s", got, ms(day))
	}
}
