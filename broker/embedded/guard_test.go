package embedded_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/internal/testutil"
)

// rawAdmin is a kadm client that sends what it is given, without the
// checks broker.Admin makes: what any Kafka client could send.
func rawAdmin(t *testing.T, addr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func topicNames(t *testing.T, adm *kadm.Client) []string {
	t.Helper()
	details, err := adm.ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return details.Names()
}

// TestEmbeddedRefusesUnstorableTopicNames pins bug 2 of issue 17: a
// 317-byte topic (a 200-byte group's changelog of a 100-byte queue) was
// created, and the broker could not load its data dir afterwards ("file
// name too long"), so every queue in it was lost. The broker now refuses
// such a name from any client, and restarts on its data dir.
func TestEmbeddedRefusesUnstorableTopicNames(t *testing.T) {
	dir := t.TempDir()
	emb, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	raw := rawAdmin(t, emb.Addr())
	if _, err := raw.CreateTopic(ctx, 1, -1, nil, "keep"); err != nil {
		t.Fatal(err)
	}
	long := broker.ChangelogTopic(strings.Repeat("g", 200), strings.Repeat("q", 100))
	for _, name := range []string{long, strings.Repeat("x", 250), "a/b", "a b", "..", "é", ""} {
		resp, err := raw.CreateTopic(ctx, 1, -1, nil, name)
		if err == nil {
			err = resp.Err
		}
		if !errors.Is(err, kerr.InvalidTopicException) || resp.ErrMessage == "" {
			t.Errorf("create %.40q (%d bytes): %v (%q), want INVALID_TOPIC_EXCEPTION with a message", name, len(name), err, resp.ErrMessage)
		}
	}
	resp, _ := raw.CreateTopic(ctx, 1, -1, nil, long)
	if !strings.Contains(resp.ErrMessage, "over Kafka's limit of 249") {
		t.Errorf("message %q does not name the limit", resp.ErrMessage)
	}
	// onceq's own admin refuses before sending, naming the limit.
	adm, err := broker.NewAdmin(broker.Conn{Brokers: []string{emb.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	err = adm.CreateTopic(ctx, long, 1, nil)
	adm.Close()
	if !errors.Is(err, broker.ErrConfig) || !strings.Contains(err.Error(), "over Kafka's limit of 249") {
		t.Errorf("Admin.CreateTopic of %d bytes: %v", len(long), err)
	}
	if names := topicNames(t, raw); len(names) != 1 || names[0] != "keep" {
		t.Errorf("topics after the refusals: %v", names)
	}
	emb.Close()

	emb, err = embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("restart on the data dir after a refused long name: %v", err)
	}
	defer emb.Close()
	if names := topicNames(t, rawAdmin(t, emb.Addr())); len(names) != 1 || names[0] != "keep" {
		t.Errorf("topics after the restart: %v", names)
	}
}

// TestEmbeddedRepairsPoisonedDataDir: a data dir that a broker without the
// name check poisoned (a topic whose partition directories cannot exist)
// starts again, without that topic and with a warning naming it.
func TestEmbeddedRepairsPoisonedDataDir(t *testing.T) {
	dir := t.TempDir()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	raw := rawAdmin(t, c.ListenAddrs()[0])
	long := strings.Repeat("x", 300)
	for _, name := range []string{"keep", long} {
		if _, err := raw.CreateTopic(context.Background(), 2, -1, nil, name); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if _, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir)); err == nil || !strings.Contains(err.Error(), "file name too long") {
		t.Fatalf("the data dir is not poisoned as the issue describes: %v", err)
	}

	var logs bytes.Buffer
	emb, err := embedded.Start(embedded.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("start on a poisoned data dir: %v", err)
	}
	defer emb.Close()
	if names := topicNames(t, rawAdmin(t, emb.Addr())); len(names) != 1 || names[0] != "keep" {
		t.Errorf("topics: %v", names)
	}
	if !strings.Contains(logs.String(), "dropped a topic whose name the data dir cannot store") || !strings.Contains(logs.String(), long) {
		t.Errorf("no warning naming the dropped topic:\n%s", logs.String())
	}
}

// TestEmbeddedRefusesHugePartitionCounts pins bug 8 of issue 17: topics
// create --partitions 999999999 took the embedded broker to 22 GB and an
// OOM kill. The broker answers INVALID_PARTITIONS with the limit, for
// CreateTopics and CreatePartitions, and creates nothing.
func TestEmbeddedRefusesHugePartitionCounts(t *testing.T) {
	emb, conn := testutil.StartEmbedded(t, "")
	ctx := context.Background()
	raw := rawAdmin(t, emb.Addr())
	resp, err := raw.CreateTopic(ctx, 999_999_999, -1, nil, "huge")
	if err == nil {
		err = resp.Err
	}
	if !errors.Is(err, kerr.InvalidPartitions) || !strings.Contains(resp.ErrMessage, "limit of 10000") {
		t.Fatalf("999,999,999 partitions: %v (%q), want INVALID_PARTITIONS naming the limit", err, resp.ErrMessage)
	}
	// A request with a bad topic and a good one is answered whole.
	resps, err := raw.CreateTopics(ctx, 20_000, -1, nil, "huge2", "fine")
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(resps["huge2"].Err, kerr.InvalidPartitions) || resps["fine"].Err == nil {
		t.Errorf("mixed request: %+v", resps)
	}
	testutil.CreateTopic(t, conn, "grow", 2)
	presp, err := raw.CreatePartitions(ctx, 999_999_999, "grow")
	if err != nil {
		t.Fatal(err)
	}
	if r := presp["grow"]; !errors.Is(r.Err, kerr.InvalidPartitions) || !strings.Contains(r.ErrMessage, "limit of 10000") {
		t.Errorf("CreatePartitions to 999,999,999: %+v", r)
	}
	if _, err := raw.CreatePartitions(ctx, 2, "grow"); err != nil {
		t.Errorf("a sensible CreatePartitions: %v", err)
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(ctx, "huge3", 999_999_999, nil); !errors.Is(err, broker.ErrConfig) || !strings.Contains(err.Error(), "want 1 to 10000") {
		t.Errorf("Admin.CreateTopic: %v", err)
	}
	if names := topicNames(t, raw); len(names) != 1 || names[0] != "grow" {
		t.Errorf("topics: %v", names)
	}
	info, err := adm.DescribeTopic(ctx, "grow")
	if err != nil || len(info.Partitions) != 4 {
		t.Errorf("grow: %+v, %v", info, err)
	}
}

// TestEmbeddedTopicConfigs: the embedded broker refuses a config it does
// not act on and a malformed value (kfake kept any config and ignored
// what it did not know), from any client, and onceq's admin refuses what
// Kafka would refuse before sending.
func TestEmbeddedTopicConfigs(t *testing.T) {
	emb, conn := testutil.StartEmbedded(t, "")
	ctx := context.Background()
	raw := rawAdmin(t, emb.Addr())
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		cfg  map[string]*string
		want string
	}{
		{map[string]*string{"x": str("y")}, `topic config "x" is not a topic config`},
		{map[string]*string{"retention.ms": str("soon")}, "want a whole number"},
		{map[string]*string{"cleanup.policy": str("forever")}, "want delete, compact"},
		{map[string]*string{"min.compaction.lag.ms": str("1000")}, "not supported by the embedded broker"},
	} {
		resp, err := raw.CreateTopic(ctx, 1, -1, tc.cfg, "cfg")
		if err == nil {
			err = resp.Err
		}
		if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(resp.ErrMessage, tc.want) {
			t.Errorf("configs %v: %v (%q), want INVALID_CONFIG and %q", tc.cfg, err, resp.ErrMessage, tc.want)
		}
	}
	if _, err := raw.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": str("compact,delete"), "retention.ms": str("-1")}, "cfg"); err != nil {
		t.Fatalf("valid configs: %v", err)
	}
	alter, err := raw.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "x", Value: str("y")}}, "cfg")
	if err != nil {
		t.Fatal(err)
	}
	if len(alter) != 1 || !errors.Is(alter[0].Err, kerr.InvalidConfig) {
		t.Errorf("IncrementalAlterConfigs x=y: %+v", alter)
	}
	alter, err = raw.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: str("60000")}}, "cfg")
	if err != nil || len(alter) != 1 || alter[0].Err != nil {
		t.Errorf("IncrementalAlterConfigs retention.ms=60000: %+v, %v", alter, err)
	}

	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for cfg, want := range map[string]string{"x": `"x" is not a Kafka topic config`, "retention.ms": "want a whole number of at least -1"} {
		if err := adm.CreateTopic(ctx, "cfg2", 1, map[string]string{cfg: "y"}); !errors.Is(err, broker.ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("Admin.CreateTopic with %s=y: %v, want ErrConfig and %q", cfg, err, want)
		}
	}
	if _, err := broker.ParseConfigs([]string{"retention.ms=1", "retention.ms=2"}); !errors.Is(err, broker.ErrConfig) {
		t.Errorf("a config given twice: %v", err)
	}
}

// TestEmbeddedAutoCreate: a client that asks for a missing topic in a
// metadata request allowing auto-creation gets it, with the default
// partition count, as from Kafka (kcat -P to a new topic hung before), but
// never one with a bad name; NoAutoCreate turns it off.
func TestEmbeddedAutoCreate(t *testing.T) {
	for _, auto := range []bool{true, false} {
		emb, err := embedded.Start(embedded.Config{Partitions: 3, NoAutoCreate: !auto})
		if err != nil {
			t.Fatal(err)
		}
		defer emb.Close()
		cl, err := kgo.NewClient(kgo.SeedBrokers(emb.Addr()), kgo.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = cl.ProduceSync(ctx, &kgo.Record{Topic: "fresh", Value: []byte("v")}).FirstErr()
		cancel()
		if auto != (err == nil) {
			t.Errorf("auto-create %v: produce to a new topic: %v", auto, err)
		}
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = true
		for _, name := range []string{"fresh2", strings.Repeat("y", 250)} {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, rt)
		}
		if _, err := req.RequestWith(context.Background(), cl); err != nil {
			t.Fatal(err)
		}
		names := topicNames(t, rawAdmin(t, emb.Addr()))
		want := []string{"fresh"}
		if !auto {
			want = nil
		}
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("auto-create %v: topics %v, want %v (a request with a bad name auto-creates nothing)", auto, names, want)
		}
		if auto {
			adm, _ := broker.NewAdmin(broker.Conn{Brokers: []string{emb.Addr()}})
			info, err := adm.DescribeTopic(context.Background(), "fresh")
			adm.Close()
			if err != nil || len(info.Partitions) != 3 {
				t.Errorf("auto-created topic: %+v, %v", info, err)
			}
		}
	}
}
