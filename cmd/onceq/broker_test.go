package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

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
