package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/testutil"
)

func TestDelayUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"delay", "--buckets", "soon"}, "--buckets"},
		{[]string{"delay", "--buckets", "1s,1s"}, "appears twice"},
		{[]string{"delay", "stats", "--buckets", "0s"}, "--buckets"},
		{[]string{"delay", "extra"}, "no arguments"},
		{[]string{"delay", "--commit-interval", "0s"}, "--commit-interval 0s: want 1ms to 1m"},
		{[]string{"delay", "--max-held", "0"}, "--max-held 0: want 1 or more"},
		{[]string{"delay", "--group", "a b"}, `--group "a b": use letters`},
		{[]string{"delay", "--max-held", "0", "--commit-interval", "0s"}, "--commit-interval 0s: want 1ms to 1m\n--max-held 0: want 1 or more"},
		{[]string{"delay", "--transaction-timeout", "20s"}, "below the session timeout"},
		{[]string{"delay", "--group-protocol", "eager"}, `--group-protocol "eager": use classic or consumer`},
		{[]string{"delay", "--group-protocol", "kip848", "--max-held", "0"}, `--group-protocol "kip848": use classic or consumer` + "\n--max-held 0: want 1 or more"},
		// Issue 17: the days overflowed into a negative duration.
		{[]string{"delay", "--buckets", "1s,1000000d"}, `--buckets: delay: bucket "1000000d": at most 365d`},
		{[]string{"delay", "stats", "--buckets", "99999999999999999999d"}, "at most 365d"},
		// Issue 17: an empty state dir took a new instance ID on every run.
		{[]string{"delay", "--state-dir", ""}, "--state-dir is empty: give a directory"},
		{[]string{"delay", "--metrics-addr", "nope"}, `--metrics-addr "nope": invalid listen address`},
		{[]string{"delay", "--metrics-addr", "127.0.0.1:70000"}, "the port is a number from 0 to 65535"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// TestDelayBusyMetricsPortExits1 pins issue 17's "a busy metrics port
// exits 2": the address is well formed, the command fails: exit 1.
func TestDelayBusyMetricsPortExits1(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr := runCLI(t, "", "delay", "--state-dir", t.TempDir(), "--metrics-addr", ln.Addr().String())
	if code != exitFailure || !strings.Contains(stderr, "cannot listen") || strings.Contains(stderr, "--help") {
		t.Fatalf("exit %d, stderr %q; want exit 1 and \"cannot listen\"", code, stderr)
	}
}

// TestDelayStats writes tasks into two buckets as a producer would and
// reads them back with "onceq delay stats".
func TestDelayStats(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	p := delay.DefaultPlanner()
	cl, err := conn.NewClient(kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, topic := range p.Topics()[:2] {
		testutil.CreateTopic(t, conn, topic, 2)
	}
	now := time.Now()
	var recs []*kgo.Record
	for i, d := range []time.Duration{2 * time.Second, 3 * time.Second, 10 * time.Second} {
		task := onceq.Task{ID: "t" + string(rune('a'+i)), Queue: "q", Due: now.Add(d)}
		recs = append(recs, task.Record(p.Route(now, task.Due).Topic))
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	code, out, stderr := runCLI(t, "", "--brokers", conn.Brokers[0], "delay", "stats", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got delayStatsOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Group != "onceq-delay" || got.Waiting != 3 || got.DueWithin["1m"] != 3 || len(got.Buckets) != 8 ||
		got.Buckets[0].Bucket != "1s" || got.Buckets[0].Waiting != 2 || got.Buckets[1].Waiting != 1 {
		t.Fatalf("stats: %s", out)
	}

	code, out, _ = runCLI(t, "", "--brokers", conn.Brokers[0], "delay", "stats")
	if code != 0 || !strings.Contains(out, "BUCKET") || !strings.Contains(out, "total") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

// TestDelayGroupProtocolFlag: --group-protocol defaults to the library's
// default, as the worker's does.
func TestDelayGroupProtocolFlag(t *testing.T) {
	f := newDelayCmd(&globals{}).Flag("group-protocol")
	if f == nil || f.DefValue != delay.DefaultGroupProtocol {
		t.Fatalf("onceq delay --group-protocol: %v, want the default %q", f, delay.DefaultGroupProtocol)
	}
}

// TestDelayRunsAndStops runs "onceq delay" in-process until its context
// ends, with each group protocol: it joins the group, then commits,
// leaves and exits 0.
func TestDelayRunsAndStops(t *testing.T) {
	for _, protocol := range []string{broker.ClassicGroup, broker.ConsumerGroup} {
		t.Run(protocol, func(t *testing.T) { testDelayRunsAndStops(t, protocol) })
	}
}

func testDelayRunsAndStops(t *testing.T, protocol string) {
	_, conn := testutil.StartBroker(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--brokers", conn.Brokers[0], "delay", "--buckets", "100ms,1s", "--group-protocol", protocol,
			"--state-dir", t.TempDir(), "--metrics-addr", "127.0.0.1:0"}, strings.NewReader(""), &bytes.Buffer{}, &stderr)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "partitions assigned") {
		if time.Now().After(deadline) {
			t.Fatalf("not running after 30s:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stderr.String(), "delay service stopped") || !strings.Contains(stderr.String(), "serving metrics") {
			t.Fatalf("exit %d:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after cancel:\n%s", stderr.String())
	}
}
