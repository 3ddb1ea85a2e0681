package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
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
	addr, _ := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	cl := &http.Client{Timeout: 90 * time.Second}
	do := tokenRequests(cl, strings.TrimSpace(out), "")
	start := func() (*testutil.Process, string) {
		listen := testutil.FreeAddr(t)
		// One partition: the first server to join keeps it.
		p := testutil.Start(t, "serve", "--brokers", addr, "--listen", listen, "--data-dir", t.TempDir(), "--create-queues", "1")
		t.Cleanup(p.Kill)
		p.WaitOutput(t, "serving", 30*time.Second)
		return p, "http://" + listen + "/api/shop/jobs"
	}
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
