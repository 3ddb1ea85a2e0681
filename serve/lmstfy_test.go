package serve_test

import (
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestLmstfyCurl drives the server with curl, request by request as
// lmstfy's README documents its API: publish (PUT with delay, ttl and
// tries; the token as a parameter or X-Token), consume of two queues
// with a timeout (the first queue first; 200 "new job" with the base64
// data, ttl, elapsed_ms and remain_tries), ACK by DELETE (204), the
// queue size, and 404 "no job available".
func TestLmstfyCurl(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		curl := testutil.Curl(t)
		a := start(t, layout, serve.CreateQueues(2))
		tok := a.token("ns", false)
		run := func(args ...string) (int, map[string]any) {
			t.Helper()
			out, err := exec.Command(curl, append([]string{"-s", "-w", "\n%{http_code}"}, args...)...).Output()
			if err != nil {
				t.Fatalf("curl %s: %v", strings.Join(args, " "), err)
			}
			i := strings.LastIndexByte(string(out), '\n')
			body := strings.TrimSpace(string(out[:i]))
			code, _ := strconv.Atoi(string(out[i+1:]))
			var m map[string]any
			if body != "" {
				if err := json.Unmarshal([]byte(body), &m); err != nil {
					t.Fatalf("curl %s: %d, body %q: %v", strings.Join(args, " "), code, body, err)
				}
			}
			return code, m
		}
		// Both queues' workers start with their first consume, once the
		// queues exist (a consume makes no queue).
		testutil.CreateTopic(t, a.conn, "ns.q1", 2)
		testutil.CreateTopic(t, a.conn, "ns.q2", 2)
		if code, body := run("-H", "X-Token: "+tok, a.url+"/api/ns/q1,q2?timeout=1"); code != 404 {
			t.Fatalf("consume of empty queues: %d %v", code, body)
		}
		// Publish a job: PUT /api/:namespace/:queue, the token in the query
		// or in X-Token; q2's first.
		code, body := run("-X", "PUT", "-H", "X-Token: "+tok, a.url+"/api/ns/q2?tries=1", "--data-binary", "second")
		if code != 201 || body["msg"] != "published" || body["job_id"] == "" {
			t.Fatalf("publish to q2: %d %v", code, body)
		}
		id2 := body["job_id"].(string)
		code, body = run("-X", "PUT", a.url+"/api/ns/q1?delay=0&ttl=3600&tries=2&token="+tok, "--data-binary", "hello lmstfy")
		if code != 201 {
			t.Fatalf("publish: %d %v", code, body)
		}
		id1 := body["job_id"].(string)
		// Both jobs wait for a consumer, each in its queue's handler: then a
		// consume of both queues gets q1's first.
		a.waitHandlers(2)
		// Consume q1 and q2 (timeout needed for several queues): q1 first.
		for _, want := range []struct{ id, queue, data string }{{id1, "q1", "hello lmstfy"}, {id2, "q2", "second"}} {
			code, body = run("-H", "X-Token: "+tok, a.url+"/api/ns/q1,q2?ttr=30&timeout=10")
			data, _ := base64.StdEncoding.DecodeString(body["data"].(string))
			if code != 200 || body["msg"] != "new job" || body["job_id"] != want.id || body["queue"] != want.queue || body["namespace"] != "ns" || string(data) != want.data {
				t.Fatalf("consume: %d %v; want %s of %s", code, body, want.id, want.queue)
			}
			if want.queue == "q1" && (body["remain_tries"] != 1.0 || body["ttl"].(float64) <= 3500 || body["elapsed_ms"] == nil) {
				t.Fatalf("consume of q1's job: remain_tries, ttl, elapsed_ms: %v", body)
			}
			// ACK: DELETE /api/:namespace/:queue/job/:job_id, 204.
			if code, body = run("-X", "DELETE", "-H", "X-Token: "+tok, a.url+"/api/ns/"+want.queue+"/job/"+want.id); code != 204 {
				t.Fatalf("ack: %d %v", code, body)
			}
		}
		if code, body = run("-H", "X-Token: "+tok, a.url+"/api/ns/q1?timeout=1"); code != 404 || body["msg"] != "no job available" {
			t.Fatalf("consume of an empty queue: %d %v", code, body)
		}
		if code, body = run("-H", "X-Token: "+tok, a.url+"/api/ns/q1/size"); code != 200 || body["size"] != 0.0 || body["queue"] != "q1" {
			t.Fatalf("size: %d %v", code, body)
		}
	})
}
