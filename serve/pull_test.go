package serve_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestPullConsumeAck: HTTP consumers take tasks with a time-to-run and
// acknowledge them with a result: each is acknowledged once; a task
// dropped on its first attempt comes back for its second; one never
// acknowledged is dead after its tries; bad consume parameters are 400.
func TestPullConsumeAck(t *testing.T) {
	a := start(t, serve.CreateQueues(2), serve.DataDir(t.TempDir()))
	tok := a.token("shop", false)
	const n = 40
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"id":"t-%d","payload":"p-%d","max_attempts":2}`, i, i))
	}
	if code, body := a.do("POST", "/api/shop/jobs/bulk", tok, "["+strings.Join(lines, ",")+"]"); code != 201 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	for _, tc := range []struct{ path, field string }{
		{"/api/shop/jobs?count=0", "count"},
		{"/api/shop/jobs?count=101", "count"},
		{"/api/shop/jobs?ttr=0", "ttr"},
		{"/api/shop/jobs?timeout=x", "timeout"},
		{"/api/shop/jobs?timeout=1&timeout=2", "timeout"},
	} {
		if code, body := a.do("GET", tc.path, tok, ""); code != 400 || body["field"] != tc.field {
			t.Errorf("GET %s: %d %v; want 400 naming %s", tc.path, code, body, tc.field)
		}
	}
	dropFirst := map[string]bool{"t-1": true, "t-2": true, "t-3": true, "t-4": true}
	var mu sync.Mutex
	acks := map[string]int{}
	attempts := map[string][]int{}
	deadline := time.Now().Add(90 * time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				mu.Lock()
				finished := len(acks) == n-1
				mu.Unlock()
				if finished {
					return
				}
				code, jobs := consume(t, a, tok, "/api/shop/jobs?ttr=3&timeout=1&count=2")
				if code == 404 {
					continue
				}
				if code != 200 {
					t.Errorf("consume: %d", code)
					return
				}
				for _, j := range jobs {
					payload, _ := base64.StdEncoding.DecodeString(j.Data)
					if string(payload) != "p-"+strings.TrimPrefix(j.JobID, "t-") || j.Queue != "jobs" || j.Namespace != "shop" {
						t.Errorf("handed out %+v (payload %q)", j, payload)
					}
					mu.Lock()
					attempts[j.JobID] = append(attempts[j.JobID], j.Attempt)
					mu.Unlock()
					if j.JobID == "t-0" || dropFirst[j.JobID] && j.Attempt == 1 {
						continue // never acknowledged: its ttr passes
					}
					code, out := a.del("/api/shop/jobs/job/"+j.JobID, tok, "r-"+j.JobID)
					if code != 204 || out != "acknowledged" {
						t.Errorf("ack of %s: %d %s; want 204 acknowledged", j.JobID, code, out)
						continue
					}
					mu.Lock()
					acks[j.JobID]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		id := fmt.Sprintf("t-%d", i)
		if acks[id] != 1 {
			t.Errorf("%s acknowledged %d times (attempts handed out %v)", id, acks[id], attempts[id])
		}
	}
	for id := range dropFirst {
		if fmt.Sprint(attempts[id]) != "[1 2]" {
			t.Errorf("%s handed out at attempts %v; want [1 2]", id, attempts[id])
		}
	}
	code, body := a.do("GET", "/api/shop/jobs/task/t-7", tok, "")
	if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "succeeded" || task["result"] != base64.StdEncoding.EncodeToString([]byte("r-t-7")) {
		t.Fatalf("an acknowledged task: %d %v", code, body)
	}
	code, body = a.do("GET", "/api/shop/jobs/job/t-0/wait?timeout=60", tok, "")
	if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "dead" {
		t.Fatalf("the task never acknowledged: %d %v; want dead", code, body)
	}
}

type handedOut struct {
	Namespace, Queue string
	JobID            string `json:"job_id"`
	Data             string
	Attempt          int
	RemainTries      int `json:"remain_tries"`
	Lease            string
	Priority         *int // nil when the answer leaves it out
}

// consume long-polls for tasks.
func consume(t *testing.T, a *api, tok, path string) (int, []handedOut) {
	req, _ := http.NewRequest("GET", a.url+path, nil)
	req.Header.Set("X-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var jobs []handedOut
	if resp.StatusCode == 200 && len(b) > 0 && b[0] == '{' { // count=1: one object
		jobs = make([]handedOut, 1)
		if err := json.Unmarshal(b, &jobs[0]); err != nil {
			t.Errorf("consume: %s: %v", b, err)
		}
	} else if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &jobs); err != nil {
			t.Errorf("consume: %s: %v", b, err)
		}
	}
	return resp.StatusCode, jobs
}

// TestDeadLetters: a task not acknowledged within its ttr on its only try
// is dead; the dead-letter endpoints show it, respawn it, and it runs
// again and is acknowledged.
func TestDeadLetters(t *testing.T) {
	a := start(t, serve.CreateQueues(1), serve.DataDir(t.TempDir()))
	tok := a.token("shop", false)
	if code, body := a.do("GET", "/api/shop/mail/deadletter", tok, ""); code != 200 || body["deadletter_size"] != 0.0 {
		t.Fatalf("dead letters of a queue without any: %d %v", code, body)
	}
	if code, body := a.do("PUT", "/api/shop/mail?id=d-1&tries=1", tok, "x"); code != 201 {
		t.Fatalf("publish: %d %v", code, body)
	}
	code, jobs := consume(t, a, tok, "/api/shop/mail?ttr=1&timeout=10&count=1")
	if code != 200 || len(jobs) != 1 {
		t.Fatalf("consume: %d %v", code, jobs)
	}
	// Not acknowledged: dead after its ttr.
	code, body := a.do("GET", "/api/shop/mail/job/d-1/wait?timeout=30", tok, "")
	if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "dead" {
		t.Fatalf("wait: %d %v; want dead", code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body = a.do("GET", "/api/shop/mail/deadletter", tok, "")
		if code == 200 && body["deadletter_size"] == 1.0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if letters, _ := body["letters"].([]any); code != 200 || body["deadletter_head"] != "d-1" || len(letters) != 1 {
		t.Fatalf("dead letters: %d %v", code, body)
	}
	if code, body = a.do("GET", "/api/shop/mail/deadletter/size", tok, ""); code != 200 || body["size"] != 1.0 {
		t.Fatalf("dead letter size: %d %v", code, body)
	}
	for _, bad := range []string{"?limit=0", "?limit=x", "?limit=1001"} {
		if code, body := a.do("PUT", "/api/shop/mail/deadletter"+bad, tok, ""); code != 400 || body["field"] != "limit" {
			t.Errorf("respawn%s: %d %v", bad, code, body)
		}
	}
	if code, body = a.do("PUT", "/api/shop/mail/deadletter?id=nope", tok, ""); code != 404 || body["field"] != "id" {
		t.Fatalf("respawn of an ID without dead letter: %d %v", code, body)
	}
	if code, body = a.do("PUT", "/api/shop/mail/deadletter?limit=5", tok, ""); code != 200 || body["count"] != 1.0 {
		t.Fatalf("respawn: %d %v", code, body)
	}
	code, jobs = consume(t, a, tok, "/api/shop/mail?ttr=30&timeout=10&count=1")
	if code != 200 || len(jobs) != 1 || jobs[0].JobID != "d-1" || jobs[0].Attempt != 1 {
		t.Fatalf("consume of the respawned task: %d %+v", code, jobs)
	}
	if code, out := a.del("/api/shop/mail/job/d-1", tok, "ok"); code != 204 || out != "acknowledged" {
		t.Fatalf("ack of the respawned task: %d %s; want 204 acknowledged", code, out)
	}
}

// TestUnaskedJobsGoBackOnce: of jobs the worker fetched for a consume
// that took one of them, the others go back to their queue once the
// queue was not wanted for releaseAfter, each once and as it came: its
// attempt and tries unchanged. The ACK of the job taken, which its run
// holds, has the worker fetch nothing, so none comes back: the queue's
// topic holds one record more per job that went back, and no more, once
// nothing wants the queue. The job taken shows running until its ACK;
// the others, never taken, pending.
func TestUnaskedJobsGoBackOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := start(t, serve.CreateQueues(1), serve.ReleaseAfter(time.Second), serve.Registerer(reg))
	tok := a.token("shop", false)
	const n = 20
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"id":"w-%d","payload":"p","max_attempts":3}`, i))
	}
	if code, body := a.do("POST", "/api/shop/idle/bulk", tok, "["+strings.Join(lines, ",")+"]"); code != 201 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	j := consumeOne(t, a, tok, "/api/shop/idle?ttr=120")
	waitRecords(t, a, "shop.idle", 2*n-1)
	// The job taken runs, in its record, with its server's worker; the
	// others, offered and never taken, are pending (below).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		code, body := a.do("GET", "/api/shop/idle/task/"+j.JobID, tok, "")
		if task, _ := body["task"].(map[string]any); code == 200 && task != nil && task["state"] == "running" && task["worker"] != "" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("peek of %s, taken and not acknowledged: %d %v; want running", j.JobID, code, body)
		}
	}
	if code, out := a.del("/api/shop/idle/job/"+j.JobID, tok, "done"); code != 204 || out != "acknowledged" {
		t.Fatalf("ACK of %s: %d %s; want 204 acknowledged", j.JobID, code, out)
	}
	waitGauge(t, reg, "onceq_wanted_queues", 0)
	checkWentBackOnce(t, a, n)
	for i := range n {
		id := fmt.Sprintf("w-%d", i)
		if id == j.JobID {
			continue
		}
		code, body := a.do("GET", "/api/shop/idle/task/"+id, tok, "")
		if task, _ := body["task"].(map[string]any); code != 200 || body["attempt"] != 1.0 || body["remain_tries"] != 3.0 || task != nil && task["state"] != "pending" {
			t.Errorf("peek of %s, never consumed: %d %v; want attempt 1, 3 tries left, pending", id, code, body)
		}
	}
}

// TestUnaskedJobsGoBackOnceAcrossServers: a queue's jobs that its owner
// fetched for another server's consumer, which took one and left, go back
// to their queue once, as they came, once that server's want and the
// grants it brought ended: the owner fetches the queue no more by then.
func TestUnaskedJobsGoBackOnceAcrossServers(t *testing.T) {
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := start(t, serve.CreateQueues(1), serve.ReleaseAfter(time.Second), serve.Registerer(regA))
	b := startOn(t, a.conn, serve.ReleaseAfter(time.Second), serve.Registerer(regB))
	tok := a.token("shop", false)
	const n = 20
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"id":"w-%d","payload":"p","max_attempts":3}`, i))
	}
	if code, body := a.do("POST", "/api/shop/idle/bulk", tok, "["+strings.Join(lines, ",")+"]"); code != 201 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	owner, other, reg := a, b, regA
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if serve.Owns(b.srv, "shop.idle") {
			owner, other, reg = b, a, regB
		}
		if serve.Owns(owner.srv, "shop.idle") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no server owns the queue's partition after a minute")
		}
	}
	j := consumeOne(t, other, tok, "/api/shop/idle?ttr=120&timeout=5")
	waitRecords(t, a, "shop.idle", 2*n-1)
	if code, out := other.del("/api/shop/idle/job/"+j.JobID, tok, "done"); code != 204 || out != "acknowledged" {
		t.Fatalf("ACK of %s: %d %s; want 204 acknowledged", j.JobID, code, out)
	}
	waitGauge(t, reg, "onceq_wanted_queues", 0)
	checkWentBackOnce(t, a, n)
}

// checkWentBackOnce checks that the queue shop.idle, where n jobs w-<i>
// of 3 tries were published and one was taken, holds one record more per
// job that went back, each at attempt 1 of 3.
func checkWentBackOnce(t *testing.T, a *api, n int) {
	t.Helper()
	recs := testutil.ReadCommitted(t, a.conn, 30*time.Second, "shop.idle")
	copies := map[string]int{}
	for _, r := range recs {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		copies[task.ID]++
		if task.Attempt != 1 || task.MaxAttempts != 3 {
			t.Errorf("a record of %s at attempt %d of %d; want 1 of 3: going back counts no attempt", task.ID, task.Attempt, task.MaxAttempts)
		}
	}
	if len(recs) != 2*n-1 {
		t.Fatalf("the queue's topic holds %d records once nothing wants it (records by job: %v); want %d, one more for each job that went back", len(recs), copies, 2*n-1)
	}
}

// waitRecords waits until topic holds want committed records.
func waitRecords(t *testing.T, a *api, topic string, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := len(testutil.ReadCommitted(t, a.conn, 30*time.Second, topic))
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("%s holds %d records; want %d", topic, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitGauge waits until the gauge name of reg is want.
func waitGauge(t *testing.T, reg *prometheus.Registry, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := math.NaN()
		for _, mf := range mfs {
			if mf.GetName() == name {
				got = 0
				for _, m := range mf.GetMetric() {
					got += m.GetGauge().GetValue()
				}
			}
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v after a minute; want %v", name, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
