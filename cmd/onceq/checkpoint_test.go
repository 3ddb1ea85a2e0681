package main

import (
	"context"
	"encoding/json"
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
	s, err := checkpoint.Open(dir, checkpoint.Options{ClusterID: clusterID, Group: "g"})
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
	s, err := checkpoint.Open(dir, checkpoint.Options{ClusterID: "c1", Group: "g"})
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
