package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestServeCrashPull is the pull model under failure: 10,000 tasks
// (2,000 with -short; ONCEQ_SERVE_CRASH_TASKS sets it) of 3 tries consumed by 8 HTTP clients that acknowledge,
// drop 5% of the tasks handed out (never acknowledged: their ttr
// passes), crash on 1% (drop them and reconnect), and never acknowledge
// a few doomed tasks; the server process is SIGKILLed once halfway and
// restarted. Every task ends acknowledged once (one 204; or, when the
// server died during the acknowledgment or the acknowledgment came after
// the ttr, 202, succeeded as its record says) or dead-lettered after its
// tries, never both, none lost.
func TestServeCrashPull(t *testing.T) {
	n := 10_000
	if testing.Short() {
		n = 2_000
	}
	if v := os.Getenv("ONCEQ_SERVE_CRASH_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("ONCEQ_SERVE_CRASH_TASKS=%q: want a number of tasks, 100 or more", v)
		}
	}
	addr, conn := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	tok := strings.TrimSpace(out)
	listen, dataDir := testutil.FreeAddr(t), t.TempDir()
	serveArgs := []string{"serve", "--brokers", addr, "--listen", listen, "--data-dir", dataDir, "--create-queues", "4"}
	srv := testutil.Start(t, serveArgs...)
	defer func() { srv.Kill() }()
	srv.WaitOutput(t, "serving", 30*time.Second)
	base := "http://" + listen + "/api/shop/jobs"
	cl := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	do := tokenRequests(cl, tok, "")
	doomed := func(id string) bool { return hash(id)%500 == 7 }
	for i := 0; i < n; i += 1000 {
		var lines []string
		for j := i; j < min(i+1000, n); j++ {
			lines = append(lines, fmt.Sprintf(`{"id":"c-%d","payload":"%d","max_attempts":3}`, j, j))
		}
		if code, body, err := do("POST", base+"/bulk", "["+strings.Join(lines, ",")+"]"); code != 201 {
			t.Fatalf("bulk: %d %s %v", code, body, err)
		}
	}

	published := time.Now()
	var mu sync.Mutex
	acks := map[string]int{}       // 204s
	uncertain := map[string]bool{} // the acknowledgment's answer was lost, or came after the ttr (202)
	var settled atomic.Int64       // acknowledged or doomed-and-dropped for good
	var killed atomic.Bool
	var consumeNs, ackNs, consumes atomic.Int64
	// The clients stop once the server was killed and restarted and no
	// task was handed out for longer than a last retry takes to come
	// back (ttr 2s, backoff at most 4s, the 1s delay bucket).
	var lastHandout atomic.Int64
	lastHandout.Store(time.Now().UnixNano())
	quiet := func() bool { return killed.Load() && time.Since(time.Unix(0, lastHandout.Load())) > 12*time.Second }
	deadline := time.Now().Add(max(4*time.Minute, time.Duration(n)*50*time.Millisecond))
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && !quiet() {
				t0 := time.Now()
				code, body, err := do("GET", base+"?ttr=2&timeout=1", "")
				consumeNs.Add(int64(time.Since(t0)))
				consumes.Add(1)
				if err != nil || code == 502 || code == 503 {
					time.Sleep(100 * time.Millisecond) // the server is down
					continue
				}
				if code == 404 {
					continue
				}
				var j struct {
					ID      string `json:"job_id"`
					Attempt int
				}
				if code != 200 || json.Unmarshal(body, &j) != nil {
					t.Errorf("client %d: consume: %d %s", c, code, body)
					return
				}
				lastHandout.Store(time.Now().UnixNano())
				h := hash(fmt.Sprint(j.ID, "@", j.Attempt))
				switch {
				case doomed(j.ID):
					continue
				case h%100 < 5: // dropped
					continue
				case h%100 == 5: // the client crashes mid-task
					cl.CloseIdleConnections()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				t1 := time.Now()
				code, body, err = do("DELETE", base+"/job/"+j.ID, "done")
				ackNs.Add(int64(time.Since(t1)))
				mu.Lock()
				switch {
				case code == 204:
					acks[j.ID]++
					settled.Add(1)
				case err != nil || code >= 500 || code == 202:
					// 202: its ttr passed first, and its retry completes it
					uncertain[j.ID] = true
				case code == 409:
					// its ttr passed first, and it ran out of tries
				default:
					t.Errorf("client %d: ack of %s: %d %s", c, j.ID, code, body)
				}
				mu.Unlock()
			}
		}()
	}
	// Kill the server halfway, and restart it.
	for time.Now().Before(deadline) && settled.Load() < int64(n/2) {
		time.Sleep(50 * time.Millisecond)
	}
	began := time.Now()
	t.Logf("%d acknowledged %v after publishing: killing the server (%d consumes, avg %v; avg ack %v)", settled.Load(), time.Since(published).Round(time.Millisecond),
		consumes.Load(), time.Duration(consumeNs.Load()/max(consumes.Load(), 1)), time.Duration(ackNs.Load()/max(settled.Load(), 1)))
	srv.Signal(syscall.SIGKILL)
	if _, err := srv.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	killed.Store(true)
	srv = testutil.Start(t, serveArgs...)
	srv.WaitOutput(t, "serving", 30*time.Second)
	for settled.Load() < int64(n*3/4) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("restarted: three quarters acknowledged %v after the kill", time.Since(began).Round(time.Millisecond))
	wg.Wait()
	t.Logf("clients done %v after the kill", time.Since(began).Round(time.Millisecond))
	if !quiet() {
		t.Fatalf("tasks still handed out at the deadline: %d acknowledged; the restarted server's log:\n%s", settled.Load(), lastBytes(srv.Output(), 6000))
	}

	// The lost answers and the late ones: what the task's record says,
	// once the retries of the late ones ran (a consume fetches the queue).
	do("GET", base+"?ttr=2&timeout=1", "")
	for id := range uncertain {
		if acks[id] > 0 {
			continue
		}
		code, body, _ := do("GET", base+"/job/"+id+"/wait?timeout=30", "")
		if code != 200 || !strings.Contains(string(body), `"state":"succeeded"`) {
			t.Errorf("%s: its acknowledgment's answer was lost, and its record says %d %s", id, code, body)
		}
	}
	dead := map[string]int{}
	for _, r := range testutil.ReadCommitted(t, conn, 30*time.Second, broker.DLQTopic(serve.DefaultLane+"/shop.jobs")) {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		dead[task.ID]++
	}
	var nAcked, nUncertain, nDead int
	for i := range n {
		id := fmt.Sprintf("c-%d", i)
		ok := acks[id] == 1 || acks[id] == 0 && uncertain[id]
		switch {
		case acks[id] > 1:
			t.Errorf("%s acknowledged %d times", id, acks[id])
		case dead[id] > 1:
			t.Errorf("%s dead-lettered %d times", id, dead[id])
		case ok && dead[id] == 1:
			t.Errorf("%s both acknowledged and dead", id)
		case !ok && dead[id] == 0:
			t.Errorf("%s lost: neither acknowledged nor dead", id)
		case doomed(id) && dead[id] != 1:
			t.Errorf("%s, never acknowledged, is not dead", id)
		}
		switch {
		case acks[id] == 1:
			nAcked++
		case uncertain[id] && dead[id] == 0:
			nUncertain++
		case dead[id] == 1:
			nDead++
		}
	}
	t.Logf("%d tasks: %d acknowledged (204), %d whose answer the kill lost, %d dead; server killed: %v", n, nAcked, nUncertain, nDead, killed.Load())
}

func hash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// lastBytes is the end of a log, at most n bytes.
func lastBytes(s string, n int) string { return s[max(len(s)-n, 0):] }

// tokenRequests returns a function that sends a request with cl and the
// token tok to base+path, and returns the status and the body: 202 for a
// DELETE that answered 204 with Onceq-Outcome: later.
func tokenRequests(cl *http.Client, tok, base string) func(method, path, body string) (int, []byte, error) {
	return func(method, path, body string) (int, []byte, error) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("X-Token", tok)
		resp, err := cl.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusNoContent && resp.Header.Get("Onceq-Outcome") == "later" {
			// An ACK counted that completes its job when it runs again:
			// the tests count it apart from one committed, as 202.
			return http.StatusAccepted, b, err
		}
		return resp.StatusCode, b, err
	}
}
