package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/internal/testutil"
)

// writeStore creates a store of group g in a new directory: jobs/0 with
// offsets (source, changelog), two processed IDs and a state key.
func writeStore(t *testing.T, clusterID string, source, changelog int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cp")
	s, err := checkpoint.Open(dir, checkpoint.ClusterID(clusterID), checkpoint.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tp := checkpoint.TP{Topic: "jobs", Partition: 0}
	b := s.NewBatch()
	defer b.Close()
	for _, err := range []error{
		b.MarkProcessed(tp, "task-1", time.Now()),
		b.MarkProcessed(tp, "task-2", time.Now()),
		b.Set(tp, []byte("k"), []byte("v")),
		b.SetOffsets(tp, checkpoint.Offsets{Source: source, Changelog: changelog}),
		b.Commit(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckpointInspect(t *testing.T) {
	dir := writeStore(t, "c1", 7, 3)
	code, out, stderr := runCLI(t, "", "checkpoint", "inspect", dir)
	t.Logf("onceq checkpoint inspect:\n%s%s", out, stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"format version 1, cluster c1, group g", "jobs/0     7       3          2    1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	code, out, stderr = runCLI(t, "", "checkpoint", "inspect", "--json", dir)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var got struct {
		Dir string `json:"dir"`
		checkpoint.Stats
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if got.Dir != dir || got.Group != "g" || len(got.Partitions) != 1 || got.Partitions[0].IDs != 2 ||
		got.Partitions[0].Offsets == nil || got.Partitions[0].Offsets.Source != 7 || got.DiskBytes == 0 {
		t.Errorf("JSON: %+v", got)
	}
}

func TestCheckpointInspectRefuses(t *testing.T) {
	dir := writeStore(t, "c1", 7, 3)
	s, err := checkpoint.Open(dir, checkpoint.ClusterID("c1"), checkpoint.Group("g"))
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "", "checkpoint", "inspect", dir)
	s.Close()
	if code != exitFailure || !strings.Contains(stderr, "is in use") {
		t.Errorf("store in use: exit %d, %q", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"checkpoint", "inspect", filepath.Join(t.TempDir(), "none")}, "does not exist"},
		{[]string{"checkpoint", "inspect", t.TempDir()}, "holds no checkpoint store"},
		{[]string{"checkpoint", "inspect"}, "want one checkpoint directory"},
		{[]string{"checkpoint", "verify", dir}, "--group is required"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

func TestCheckpointVerify(t *testing.T) {
	testutil.NeedsEmbedded(t, "reads the embedded broker's cluster ID")
	emb, conn := testutil.StartBroker(t, "")
	changelog := broker.ChangelogTopic("g", "jobs")
	testutil.CreateTopic(t, conn, "jobs", 1)
	testutil.CreateTopic(t, conn, changelog, 1)
	// The worker writes its changelog in transactions: each ends with a
	// commit marker, which takes an offset too.
	cl, err := conn.NewClient(kgo.TransactionalID("verify-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	produce := func(n int) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			k, v := checkpoint.EncodeMark("task", time.Now())
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: changelog, Key: k, Value: v}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(at int64) {
		offs := kadm.Offsets{}
		offs.Add(kadm.Offset{Topic: "jobs", Partition: 0, At: at})
		if err := kadm.NewClient(cl).CommitAllOffsets(ctx, "g", offs); err != nil {
			t.Fatal(err)
		}
	}
	produce(3) // offsets 0-2, marker at 3
	commit(7)
	dir := writeStore(t, emb.ClusterID(), 7, 3)
	args := []string{"checkpoint", "verify", dir, "--group", "g", "--brokers", conn.Brokers[0]}

	code, out, stderr := runCLI(t, "", args...)
	if code != 0 || !strings.Contains(out, "1 partitions in sync") {
		t.Fatalf("in sync: exit %d\n%s%s", code, out, stderr)
	}

	produce(2) // offsets 4-5, marker at 6
	code, out, stderr = runCLI(t, "", args...)
	if code != exitFailure || !strings.Contains(out, "jobs/0     7       7          3          7              2          drift: changelog records not in the store") {
		t.Errorf("changelog ahead: exit %d\n%s%s", code, out, stderr)
	}

	commit(9)
	code, out, stderr = runCLI(t, "", args...)
	t.Logf("onceq %s:\n%s%s", strings.Join(args, " "), out, stderr)
	if code != exitFailure || !strings.Contains(out, "the store is behind the group's commit") {
		t.Errorf("group ahead: exit %d\n%s", code, out)
	}

	code, _, stderr = runCLI(t, "", "checkpoint", "verify", dir, "--group", "other", "--brokers", conn.Brokers[0])
	if code != exitUsage || !strings.Contains(stderr, `belongs to group "g"`) {
		t.Errorf("other group: exit %d, %q", code, stderr)
	}
}

// writeChangelog writes n marks to partition 0 of topic in one transaction
// (n data records and a commit marker), as a worker does.
func writeChangelog(t *testing.T, conn broker.Conn, topic string, n int) {
	t.Helper()
	cl, err := conn.NewClient(kgo.TransactionalID("changelog-writer-"+topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		k, v := checkpoint.EncodeMark(fmt.Sprintf("task-%d", i), time.Now())
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: k, Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// commitGroup commits offset at on partition 0 of topic for group.
func commitGroup(t *testing.T, conn broker.Conn, group, topic string, at int64) {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: at, LeaderEpoch: -1})
	if err := adm.Kadm().CommitAllOffsets(context.Background(), group, offs); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointVerifyChangelogBehindStore pins the second half of bug 7
// of issue 17: after "topics delete" removed a changelog (and a worker
// made a new, empty one), verify still said "in sync", and 100 resubmitted
// IDs ran again. A changelog that ends before the store's offset, or that
// is missing, is drift.
func TestCheckpointVerifyChangelogBehindStore(t *testing.T) {
	testutil.NeedsEmbedded(t, "reads the embedded broker's cluster ID")
	emb, conn := testutil.StartBroker(t, "")
	changelog := broker.ChangelogTopic("g", "jobs")
	testutil.CreateTopic(t, conn, "jobs", 1)
	commitGroup(t, conn, "g", "jobs", 7)
	dir := writeStore(t, emb.ClusterID(), 7, 101) // 100 marks and a commit marker
	args := []string{"checkpoint", "verify", dir, "--group", "g", "--brokers", conn.Brokers[0]}

	code, out, stderr := runCLI(t, "", args...)
	t.Logf("changelog missing:\n%s%s", out, stderr)
	if code != exitFailure || !strings.Contains(out, "drift: the changelog "+changelog+" does not exist") {
		t.Errorf("changelog missing: exit %d\n%s%s", code, out, stderr)
	}

	testutil.CreateTopic(t, conn, changelog, 1)
	writeChangelog(t, conn, changelog, 3) // recreated: offsets 0-2, marker at 3
	code, out, stderr = runCLI(t, "", append(args, "--json")...)
	t.Logf("changelog recreated:\n%s%s", out, stderr)
	var d checkpoint.Drift
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if code != exitFailure || d.ChangelogOffset != 101 || d.ChangelogEnd != 4 || len(d.Problems) != 1 ||
		!strings.Contains(d.Problems[0], "the changelog is behind the store: it ends at 4, before the store's offset 101") {
		t.Errorf("changelog behind the store: exit %d, %+v", code, d)
	}
}

// TestCheckpointVerifySharedLegacyChangelog pins the verify half of bug 1
// of issue 17: group "a" with queue "b-c" and group "a-b" with queue "c"
// shared the changelog onceq-changelog-a-b-c, group a restored group
// a-b's records and skipped its own tasks, and verify said "in sync".
func TestCheckpointVerifySharedLegacyChangelog(t *testing.T) {
	testutil.NeedsEmbedded(t, "reads the embedded broker's cluster ID")
	emb, conn := testutil.StartBroker(t, "")
	legacy := broker.LegacyChangelogTopic("a", "b-c")
	if legacy != broker.LegacyChangelogTopic("a-b", "c") {
		t.Fatal("the pair does not collide under the old names")
	}
	for _, q := range []string{"c", "b-c", legacy} {
		testutil.CreateTopic(t, conn, q, 1)
	}
	writeChangelog(t, conn, legacy, 3) // offsets 0-2, marker at 3
	commitGroup(t, conn, "a-b", "c", 3)
	commitGroup(t, conn, "a", "b-c", 3)
	dir := filepath.Join(t.TempDir(), "cp")
	s, err := checkpoint.Open(dir, checkpoint.ClusterID(emb.ClusterID()), checkpoint.Group("a"))
	if err != nil {
		t.Fatal(err)
	}
	tp := checkpoint.TP{Topic: "b-c", Partition: 0}
	b := s.NewBatch()
	if err := b.SetOffsets(tp, checkpoint.Offsets{Source: 3, Changelog: 4}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	s.Close()

	code, out, stderr := runCLI(t, "", "checkpoint", "verify", dir, "--group", "a", "--brokers", conn.Brokers[0])
	t.Logf("onceq checkpoint verify:\n%s%s", out, stderr)
	if code != exitFailure || !strings.Contains(out, `drift: the changelog onceq-changelog-a-b-c holds another group's records: group "a-b" (queue "c")`) {
		t.Errorf("shared changelog: exit %d\n%s%s", code, out, stderr)
	}
	// Alone under its old name, it is still reported: workers refuse it.
	if code, _, stderr := runCLI(t, "", "topics", "delete", "c", "--brokers", conn.Brokers[0]); code != 0 {
		t.Fatal(stderr)
	}
	code, out, _ = runCLI(t, "", "checkpoint", "verify", dir, "--group", "a", "--brokers", conn.Brokers[0])
	if code != exitFailure || !strings.Contains(out, "still has its old, ambiguous name onceq-changelog-a-b-c") {
		t.Errorf("old name alone: exit %d\n%s", code, out)
	}
}

// TestCheckpointInspectReadOnlyCopy: "checkpoint inspect" reads a copy of a
// store in a directory it cannot write (it failed creating Pebble's LOCK
// file), and a file instead of a directory is bad input.
func TestCheckpointInspectReadOnlyCopy(t *testing.T) {
	dir := writeStore(t, "c1", 7, 3)
	file := filepath.Join(t.TempDir(), "store.txt")
	if err := os.WriteFile(file, []byte("not a store"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "", "checkpoint", "inspect", file); code != exitUsage || !strings.Contains(stderr, "is a file") {
		t.Errorf("inspect a file: exit %d, %q", code, stderr)
	}
	if os.Geteuid() == 0 {
		t.Skip("root writes to read-only directories; checkpoint.TestReadOnlyCopy covers this with a read-only filesystem")
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	code, out, stderr := runCLI(t, "", "checkpoint", "inspect", dir)
	if code != 0 || !strings.Contains(out, "group g") {
		t.Fatalf("inspect a read-only copy: exit %d\n%s%s", code, out, stderr)
	}
}
