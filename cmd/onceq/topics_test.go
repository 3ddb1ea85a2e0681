package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// listTopics returns every topic of the broker at conn, internal ones too.
func listTopics(t *testing.T, conn broker.Conn) []string {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	names, err := adm.ListTopics(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestTopicsCreateBadInput pins bug 8 of issue 17 (topics create
// --partitions 999999999 took the embedded broker to 22 GB) and the
// unchecked configs: bad input exits 2, names the flag, the value and the
// limit, and creates nothing.
func TestTopicsCreateBadInput(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	b := conn.Brokers[0]
	long := strings.Repeat("q", 240)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topics", "create", "q", "--partitions", "999999999"}, "--partitions 999999999: want 1 to 10000"},
		{[]string{"topics", "create", "q", "--partitions", "10001"}, "want 1 to 10000"},
		{[]string{"topics", "create", "q", "--partitions", "-1"}, "want 1 to 10000"},
		{[]string{"topics", "create", "q", "--config", "x=y"}, `--config: broker: topic config "x" is not a Kafka topic config`},
		{[]string{"topics", "create", "q", "--config", "retention.ms=soon"}, `retention.ms="soon": want a whole number`},
		{[]string{"topics", "create", "q", "--config", "cleanup.policy=never"}, "want delete, compact"},
		{[]string{"topics", "create", "q", "--config", "retention.ms=1", "--config", "retention.ms=2"}, "given twice"},
		{[]string{"topics", "create", "q", "--config", "retention.ms=" + strings.Repeat("9", 5000)}, "over the limit of 4096"},
		{[]string{"topics", "create", "q", "--config", "min.compaction.lag.ms=1000"}, "not supported by the embedded broker"},
		{[]string{"topics", "create", long}, "at most 239, so that its dead-letter topic"},
		{[]string{"topics", "create", "--internal", strings.Repeat("x", 250)}, "1 to 249 bytes"},
	} {
		code, _, stderr := runCLI(t, "", append(tc.args, "--brokers", b)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
	if names := listTopics(t, conn); len(names) != 0 {
		t.Errorf("bad input created topics: %v", names)
	}
	code, out, stderr := runCLI(t, "", "topics", "create", "q", "--partitions", "10000", "--config", "retention.ms=60000", "--brokers", b)
	if code != 0 || !strings.Contains(out, "created q with 10000 partitions") {
		t.Errorf("10,000 partitions: exit %d, %s%s", code, out, stderr)
	}
}

// TestTopicsDeleteRefusesInternal pins bug 7 of issue 17: topics delete
// deleted a changelog, and 100 resubmitted IDs ran again. Internal topics
// are refused without --internal.
func TestTopicsDeleteRefusesInternal(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	b := conn.Brokers[0]
	internal := []string{broker.ChangelogTopic("g", "jobs"), broker.LegacyChangelogTopic("g", "jobs"), broker.DLQTopic("jobs"),
		broker.DelayTopic(time.Second), "__consumer_offsets_copy"}
	for _, name := range internal {
		testutil.CreateTopic(t, conn, name, 1)
		code, _, stderr := runCLI(t, "", "topics", "delete", name, "--brokers", b)
		if code != exitUsage || !strings.Contains(stderr, "is internal") || !strings.Contains(stderr, "--internal") {
			t.Errorf("delete %s: exit %d, %q; want exit 2 and a hint at --internal", name, code, stderr)
		}
	}
	if names := listTopics(t, conn); len(names) != len(internal) {
		t.Fatalf("topics after refused deletes: %v", names)
	}
	code, out, stderr := runCLI(t, "", "topics", "delete", internal[0], "--internal", "--brokers", b)
	if code != 0 || !strings.Contains(out, "deleted "+internal[0]) {
		t.Fatalf("delete --internal: exit %d, %s%s", code, out, stderr)
	}
	testutil.CreateTopic(t, conn, "jobs", 1)
	if code, _, stderr := runCLI(t, "", "topics", "delete", "jobs", "--brokers", b); code != 0 {
		t.Fatalf("delete a queue: exit %d, %s", code, stderr)
	}
}

// TestWorkerRefusesLongNames pins bug 2 of issue 17 at the worker's edge:
// a 200-byte group with a 100-byte queue wedged the worker (and broke the
// embedded broker's data dir). The worker exits 2, naming the limit.
func TestWorkerRefusesLongNames(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	group, queue := strings.Repeat("g", 200), strings.Repeat("q", 100)
	testutil.CreateTopic(t, conn, queue, 1)
	// Bounded: before the fix the worker ran on, committing nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"worker", "--group", group, "--queue", queue, "--handler", "noop",
		"--checkpoint-dir", t.TempDir(), "--brokers", conn.Brokers[0]}, strings.NewReader(""), &out, &errOut)
	stderr := errOut.String()
	if code != exitUsage || !strings.Contains(stderr, "over Kafka's limit of 249 on topic names") {
		t.Fatalf("exit %d, %q; want exit 2 naming the limit", code, stderr)
	}
	if names := listTopics(t, conn); len(names) != 1 {
		t.Errorf("topics: %v", names)
	}
}

// TestBrokerAutoCreate: kcat -P to a topic that does not exist hung;
// onceq broker now creates it on first use, as Kafka does by default, and
// not with --auto-create=false.
func TestBrokerAutoCreate(t *testing.T) {
	kcat := testutil.Kcat(t)
	for _, auto := range []bool{true, false} {
		args := []string{"--partitions", "3"}
		if !auto {
			args = append(args, "--auto-create=false")
		}
		_, addr := testutil.StartBrokerProcess(t, "", t.TempDir(), args...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		produce := exec.CommandContext(ctx, kcat, "-b", addr, "-P", "-t", "fresh", "-m", "10", "-X", "message.timeout.ms=3000")
		produce.Stdin = strings.NewReader("one\n")
		out, err := produce.CombinedOutput()
		cancel()
		if auto && err != nil {
			t.Fatalf("kcat -P to a new topic: %v\n%s", err, out)
		}
		names := listTopics(t, broker.Conn{Brokers: []string{addr}})
		if auto != (len(names) == 1 && names[0] == "fresh") {
			t.Fatalf("--auto-create=%v: topics %v after kcat -P (%v)", auto, names, err)
		}
		if auto {
			recs := testutil.ReadCommitted(t, broker.Conn{Brokers: []string{addr}}, 30*time.Second, "fresh")
			if len(recs) != 1 || string(recs[0].Value) != "one" {
				t.Fatalf("read back %d records", len(recs))
			}
		}
	}
}
