package main

import (
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

func TestBrokerSecondOnSameDataDirExits1(t *testing.T) {
	dir := t.TempDir()
	first, _ := testutil.StartBrokerProcess(t, "", dir)
	second := testutil.Start(t, "broker", "--listen", "127.0.0.1:0", "--data-dir", dir)
	code, err := second.Wait(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(second.Output(), "is in use") {
		t.Fatalf("second broker: exit %d, output:\n%s", code, second.Output())
	}
	first.Signal(syscall.SIGTERM)
	if code, err := first.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("first broker after SIGTERM: exit %d, %v\n%s", code, err, first.Output())
	}
	if !strings.Contains(first.Output(), "broker stopped") {
		t.Fatalf("no clean stop logged:\n%s", first.Output())
	}
}

// TestKcatInterop checks that a third-party client speaks to onceq broker:
// kcat lists metadata, produces records with onceq headers and reads them
// back, and onceq decodes what kcat wrote.
func TestKcatInterop(t *testing.T) {
	kcat := testutil.Kcat(t)
	_, addr := testutil.StartBrokerProcess(t, "", t.TempDir())
	code, _, stderr := runCLI(t, "", "--brokers", addr, "topics", "create", "interop", "--partitions", "2")
	if code != 0 {
		t.Fatalf("topics create: %d %s", code, stderr)
	}
	meta, err := exec.Command(kcat, "-b", addr, "-L").CombinedOutput()
	if err != nil || !strings.Contains(string(meta), `topic "interop" with 2 partitions`) {
		t.Fatalf("kcat -L: %v\n%s", err, meta)
	}
	produce := exec.Command(kcat, "-b", addr, "-P", "-t", "interop", "-K", ":",
		"-H", "onceq-id=kcat-1", "-H", "onceq-due=1700000000000", "-H", "onceq-attempt=2", "-H", "trace=t1")
	produce.Stdin = strings.NewReader("key1:payload-one\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	consume := exec.Command(kcat, "-b", addr, "-C", "-t", "interop", "-e", "-q", "-c", "1",
		"-X", "isolation.level=read_committed", "-f", "%k|%s|%h\n")
	out, err := consume.CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	want := "key1|payload-one|onceq-id=kcat-1,onceq-due=1700000000000,onceq-attempt=2,trace=t1"
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("kcat read %q, want %q", out, want)
	}
	recs := testutil.ReadCommitted(t, broker.Conn{Brokers: []string{addr}}, 30*time.Second, "interop")
	if len(recs) != 1 {
		t.Fatalf("read %d records", len(recs))
	}
	task, err := onceq.FromRecord(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if task.ID != "kcat-1" || task.Attempt != 2 || task.Due.UnixMilli() != 1700000000000 || string(task.Payload) != "payload-one" ||
		len(task.Headers) != 1 || task.Headers[0].Key != "trace" {
		t.Fatalf("decoded %+v", task)
	}
}

// TestBrokerNodes runs a three-node broker process with moving leaders:
// its "broker listening" line names every node, the first as addr, and
// clients see the three brokers.
func TestBrokerNodes(t *testing.T) {
	p, addr := testutil.StartBrokerProcess(t, "127.0.0.1:0", "", "--nodes", "3", "--move-leaders-every", "200ms")
	nodes := strings.Split(p.WaitOutput(t, `broker listening.* nodes=(\S+)`, 10*time.Second), ",")
	if len(nodes) != 3 || nodes[0] != addr {
		t.Fatalf("nodes %v, addr %s: want three, the first addr", nodes, addr)
	}
	conn := broker.Conn{Brokers: []string{addr}}
	testutil.CreateTopic(t, conn, "spread", 8)
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The moves bump the partitions' leader epochs: wait for one.
	req := kmsg.NewPtrMetadataRequest()
	topic := kmsg.NewMetadataRequestTopic()
	topic.Topic = kmsg.StringPtr("spread")
	req.Topics = append(req.Topics, topic)
	deadline := time.Now().Add(30 * time.Second)
	for {
		meta, err := req.RequestWith(t.Context(), cl)
		if err != nil || len(meta.Brokers) != 3 || len(meta.Topics) != 1 {
			t.Fatalf("metadata: %v: want 3 brokers and the topic, got %+v", err, meta)
		}
		if slices.ContainsFunc(meta.Topics[0].Partitions, func(p kmsg.MetadataResponseTopicPartition) bool { return p.LeaderEpoch > 0 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader moved within 30s: %+v", meta.Topics[0].Partitions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Signal(syscall.SIGTERM)
	if code, err := p.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("broker after SIGTERM: exit %d, %v\n%s", code, err, p.Output())
	}
}

// TestBrokerBadNodes: node counts and move intervals out of range exit 2
// naming the flag.
func TestBrokerBadNodes(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--nodes 0", "--nodes 0: want 1 to 9"},
		{"--nodes 10", "--nodes 10: want 1 to 9"},
		{"--move-leaders-every 10ms", "--move-leaders-every 10ms: want 0 (never) or at least 100ms"},
		{"--move-leaders-every -1s", "--move-leaders-every -1s: want 0"},
	} {
		args := append([]string{"broker", "--listen", "127.0.0.1:0", "--data-dir", ""}, strings.Fields(tc.args)...)
		code, _, stderr := runCLI(t, "", args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q: want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
