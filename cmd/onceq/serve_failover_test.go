package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestServeAckAfterRunnerKilled: a job is handed out by the server whose
// handler runs it, that server is SIGKILLed, and the consumer
// acknowledges the job through the other server, which was running all
// along. The ACK answers without waiting for the dead server's partition
// to move (the pull group's session timeout): 204, Onceq-Outcome later,
// since the dead server no longer answers a probe. The job then completes
// once, with the acknowledged result, when the surviving server takes
// the partition and runs it again; it is not handed out again.
func TestServeAckAfterRunnerKilled(t *testing.T) {
	// One partition: the first server to join keeps it.
	_, do, start := serverPair(t, 1)
	runner, runnerURL := start()
	code, body, err := do("PUT", runnerURL+"?tries=3", "payload")
	var pub struct {
		ID string `json:"job_id"`
	}
	if code != 201 || json.Unmarshal(body, &pub) != nil || pub.ID == "" {
		t.Fatalf("publish: %d %s %v", code, body, err)
	}
	code, body, err = do("GET", runnerURL+"?ttr=120&timeout=30", "")
	var got struct {
		ID    string `json:"job_id"`
		Lease string
	}
	if code != 200 || json.Unmarshal(body, &got) != nil || got.ID != pub.ID || got.Lease == "" {
		t.Fatalf("consume: %d %s %v", code, body, err)
	}
	survivor, survivorURL := start()
	runner.Signal(syscall.SIGKILL)
	if _, err := runner.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	code, body, err = do("DELETE", survivorURL+"/job/"+pub.ID+"?lease="+got.Lease, "the-result")
	took := time.Since(sent)
	// 202 is how tokenRequests reports 204 with Onceq-Outcome: later.
	if code != http.StatusAccepted {
		t.Fatalf("ACK through the survivor: %d %s %v after %v; want 204 with Onceq-Outcome: later", code, body, err, took)
	}
	t.Logf("ACK of a run on a killed server answered in %v", took.Round(time.Millisecond))
	// The pull group's session timeout is 10s: an ACK that waited for the
	// run to move would take longer than that.
	if took > 5*time.Second {
		t.Errorf("the ACK answered after %v: it waited for the dead server's partition to move", took)
	}
	code, body, err = do("GET", survivorURL+"/job/"+pub.ID+"/wait?timeout=60", "")
	var ended struct {
		Done bool
		Task struct {
			State  string
			Result []byte
		}
	}
	if code != 200 || json.Unmarshal(body, &ended) != nil || !ended.Done {
		t.Fatalf("after the ACK: %d %s %v; want the job ended; survivor's log:\n%s", code, body, err, lastBytes(survivor.Output(), 4000))
	}
	if ended.Task.State != "succeeded" || string(ended.Task.Result) != "the-result" {
		t.Fatalf("the job ended %s with %q; want succeeded with the ACK's result", ended.Task.State, ended.Task.Result)
	}
	if code, body, _ := do("GET", survivorURL+"?ttr=30&timeout=2", ""); code != 404 {
		t.Errorf("a consume after the job completed: %d %s; want 404, no job", code, body)
	}
}

// TestServeFailoverWithinSeconds: two servers share a queue's partitions,
// and one is SIGKILLed and stays down. Through the survivor, an ACK of a
// job the dead server handed out answers at once, and the job completes
// with its result; a publish answers; and every job waiting in the dead
// server's partitions is handed out within a few seconds of the kill,
// not after the pull group's session timeout (10 s): the survivor,
// whose consumers wait, pings the dead server's member, which answers
// nothing, and removes it from the group.
func TestServeFailoverWithinSeconds(t *testing.T) {
	conn, do, start := serverPair(t, 4)
	dead, deadURL := start()
	survivor, survivorURL := start()
	const n = 40
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"id":"j-%d","payload":"p"}`, i))
	}
	if code, body, err := do("POST", deadURL+"/bulk", "["+strings.Join(lines, ",")+"]"); code != 201 {
		t.Fatalf("bulk publish: %d %s %v", code, body, err)
	}
	// Both servers hold partitions of the jobs' lane.
	owners := awaitPullOwners(t, conn, 2)
	t.Logf("partitions of the pull group's members: %v", owners)
	code, body, err := do("GET", deadURL+"?ttr=120&timeout=30", "")
	var held struct {
		ID    string `json:"job_id"`
		Lease string
	}
	if code != 200 || json.Unmarshal(body, &held) != nil || held.Lease == "" {
		t.Fatalf("consume through the server to kill: %d %s %v", code, body, err)
	}

	dead.Signal(syscall.SIGKILL)
	if _, err := dead.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	code, body, err = do("DELETE", survivorURL+"/job/"+held.ID+"?lease="+held.Lease, "the-result")
	ackTook := time.Since(killed)
	if code != http.StatusAccepted && code != http.StatusNoContent {
		t.Fatalf("ACK through the survivor: %d %s %v", code, body, err)
	}
	sent := time.Now()
	code, body, err = do("PUT", survivorURL+"?tries=3", "after the kill")
	publishTook := time.Since(sent)
	var pub struct {
		ID string `json:"job_id"`
	}
	if code != 201 || json.Unmarshal(body, &pub) != nil {
		t.Fatalf("publish through the survivor: %d %s %v", code, body, err)
	}
	// The survivor's consumers take every other job, each once.
	want := map[string]bool{pub.ID: true}
	for i := range n {
		if id := fmt.Sprintf("j-%d", i); id != held.ID {
			want[id] = true
		}
	}
	got := map[string]time.Duration{}
	deadline := killed.Add(60 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		code, body, err := do("GET", survivorURL+"?ttr=120&timeout=1", "")
		if code == 404 {
			continue
		}
		var job struct {
			ID    string `json:"job_id"`
			Lease string
		}
		if code != 200 || json.Unmarshal(body, &job) != nil {
			t.Fatalf("consume through the survivor: %d %s %v", code, body, err)
		}
		if !want[job.ID] {
			t.Fatalf("the survivor handed out %s: not a job waiting", job.ID)
		}
		if _, twice := got[job.ID]; twice {
			t.Fatalf("the survivor handed out %s twice", job.ID)
		}
		got[job.ID] = time.Since(killed)
		if code, body, err := do("DELETE", survivorURL+"/job/"+job.ID+"?lease="+job.Lease, "done"); code != 204 {
			t.Fatalf("ACK of %s: %d %s %v", job.ID, code, body, err)
		}
	}
	if len(got) < len(want) {
		t.Fatalf("%v after the kill, %d of the %d jobs waiting were handed out; survivor's log:\n%s",
			time.Since(killed).Round(time.Millisecond), len(got), len(want), lastBytes(survivor.Output(), 6000))
	}
	var last time.Duration
	for _, d := range got {
		last = max(last, d)
	}
	code, body, err = do("GET", survivorURL+"/job/"+held.ID+"/wait?timeout=60", "")
	ended := time.Since(killed)
	var rec struct {
		Done bool
		Task struct {
			State  string
			Result []byte
		}
	}
	if code != 200 || json.Unmarshal(body, &rec) != nil || !rec.Done || rec.Task.State != "succeeded" || string(rec.Task.Result) != "the-result" {
		t.Fatalf("the job acknowledged through the survivor: %d %s %v; want it succeeded with the ACK's result", code, body, err)
	}
	t.Logf("after the kill: the ACK answered in %v, a publish in %v, the last of %d jobs waiting was handed out at %v, and the job acknowledged ended at %v",
		ackTook.Round(time.Millisecond), publishTook.Round(time.Millisecond), len(want), last.Round(time.Millisecond), ended.Round(time.Millisecond))
	survivor.WaitOutput(t, "answered no probe: removed", 10*time.Second)
	// The pull group's session timeout is 10s: jobs that waited for it
	// would come later than this.
	const bound = 5 * time.Second
	if last > bound {
		t.Errorf("the last job waiting was handed out %v after the kill; want within %v", last.Round(time.Millisecond), bound)
	}
	if ended > bound {
		t.Errorf("the job acknowledged ended %v after the kill; want within %v", ended.Round(time.Millisecond), bound)
	}
	if ackTook > time.Second || publishTook > time.Second {
		t.Logf("slow answers on this machine: ACK %v, publish %v", ackTook, publishTook)
	}
}

// serverPair starts a broker and makes a token of namespace shop: it
// returns the broker, the token's requests, and start, which starts a
// server whose new queues have partitions partitions and returns it and
// the URL of its queue jobs.
func serverPair(t *testing.T, partitions int) (broker.Conn, func(method, path, body string) (int, []byte, error), func() (*testutil.Process, string)) {
	addr, conn := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	cl := &http.Client{Timeout: 90 * time.Second}
	start := func() (*testutil.Process, string) {
		listen := testutil.FreeAddr(t)
		p := testutil.Start(t, "serve", "--brokers", addr, "--listen", listen, "--data-dir", t.TempDir(), "--create-queues", strconv.Itoa(partitions))
		t.Cleanup(p.Kill)
		p.WaitOutput(t, "serving", 30*time.Second)
		return p, "http://" + listen + "/api/shop/jobs"
	}
	return conn, tokenRequests(cl, strings.TrimSpace(out), ""), start
}

// awaitPullOwners waits until members members of the serve's pull group
// hold partitions, and returns each one's.
func awaitPullOwners(t *testing.T, conn broker.Conn, members int) map[string][]int32 {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		owners := map[string][]int32{}
		gs, err := adm.Kadm().DescribeGroups(ctx, serve.DefaultPullGroup)
		if err == nil {
			for _, m := range gs[serve.DefaultPullGroup].Members {
				if a, ok := m.Assigned.AsConsumer(); ok && m.InstanceID != nil {
					for _, tp := range a.Topics {
						owners[*m.InstanceID] = append(owners[*m.InstanceID], tp.Partitions...)
					}
				}
			}
		}
		full := 0
		for _, ps := range owners {
			if len(ps) > 0 {
				full++
			}
		}
		if full >= members {
			return owners
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pull group's members never held partitions on %d servers: %v (%v)", members, owners, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
