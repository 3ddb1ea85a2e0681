package serve_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/serve"
)

// TestPeekDelayedJob: a peek (GET .../job/{id}) of a delayed job answers
// the fields it answers for a ready one, as lmstfy's peek of a delayed
// job does: its data, ttl, elapsed_ms, remain_tries and attempt, whether
// it was published with an id or without (its record says scheduled
// either way). An ACK of one not handed out cancels it (204, canceled),
// as it cancels a ready job not handed out.
func TestPeekDelayedJob(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(2))
		c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}
		// Due in 5 minutes: in the 2m bucket for the whole test.
		anon := c.publish("q", "", []byte("later"), nil, 600, 3, 300)
		if code, body := a.do("PUT", "/api/ns/q?id=order-1&delay=300&ttl=600&tries=3", c.token, "later too"); code != 201 {
			t.Fatalf("publish of order-1: %d %v", code, body)
		}
		for id, data := range map[string]string{anon: "later", "order-1": "later too"} {
			code, raw := c.do("GET", "q/job/"+id, nil, nil, nil)
			var j lmstfyJob
			var more struct {
				Attempt int `json:"attempt"`
				Task    *struct {
					State string `json:"state"`
				} `json:"task"`
			}
			if code != 200 || json.Unmarshal(raw, &j) != nil || json.Unmarshal(raw, &more) != nil {
				t.Fatalf("peek of the delayed job %s: %d %s", id, code, raw)
			}
			if j.ID != id || string(j.Data) != data || j.TTL < 590 || j.TTL > 600 || j.ElapsedMS < 0 || j.ElapsedMS > 60_000 ||
				j.RemainTries != 3 || more.Attempt != 1 {
				t.Errorf("peek of the delayed job %s: %s; want its data %q, ttl about 600, elapsed_ms, remain_tries 3 and attempt 1", id, raw, data)
			}
			if more.Task == nil || more.Task.State != "scheduled" {
				t.Errorf("peek of the delayed job %s: %s; want its scheduled record", id, raw)
			}
		}
		if code, out := a.del("/api/ns/q/job/"+anon, c.token, ""); code != 204 || out != "canceled" {
			t.Errorf("ACK of the delayed job %s, not handed out: %d %s; want 204, canceled", anon, code, out)
		}
	})
}

// TestPendingTaskPage: the console's page of a task published with an id
// and not yet run shows its own payload and the partition it waits in,
// where it showed partition 0, offset 0 and the payload of whatever task
// was written there.
func TestPendingTaskPage(t *testing.T) {
	a := start(t, serve.CreateQueues(4))
	tok := a.token("shop", false)
	ids := []string{"p-0", "p-1", "p-2", "p-3", "p-4", "p-5"}
	for _, id := range ids {
		if code, body := a.do("PUT", "/api/shop/q?id="+id, tok, "payload of "+id); code != 201 {
			t.Fatalf("publish %s: %d %v", id, code, body)
		}
	}
	for _, id := range ids {
		code, _, page := a.page("GET", "/console/q/shop.q/task/"+id, tok, nil)
		source := fmt.Sprintf("partition %d, not run yet", broker.KeyPartition([]byte(id), 4))
		if code != 200 || !strings.Contains(page, `<pre id="payload">payload of `+id+`</pre>`) || !strings.Contains(page, source) {
			t.Errorf("the page of the pending task %s: %d; want its payload and %q:\n%s", id, code, source, page)
		}
	}
}

// TestDestroyEndsTasks: destroying a queue's backlog ends its tasks
// canceled, with the reason destroyed, where they stayed pending forever
// in their records (task get, stats, the console), published with an id
// or without. A task handed out is not in the backlog: it runs on, and
// succeeds.
func TestDestroyEndsTasks(t *testing.T) {
	a := start(t, serve.CreateQueues(2))
	tok := a.token("shop", false)
	var ids []string
	for i := range 3 {
		id := fmt.Sprint("p-", i)
		if code, body := a.do("PUT", "/api/shop/q?id="+id, tok, "pending"); code != 201 {
			t.Fatalf("publish %s: %d %v", id, code, body)
		}
		ids = append(ids, id)
	}
	for range 2 {
		code, body := a.do("PUT", "/api/shop/q", tok, "no id")
		if code != 201 {
			t.Fatalf("publish: %d %v", code, body)
		}
		ids = append(ids, body["job_id"].(string))
	}
	// One handed out: not in the backlog.
	if code, body := a.do("PUT", "/api/shop/held?id=h-1", tok, "held"); code != 201 {
		t.Fatalf("publish: %d %v", code, body)
	}
	if code, body := a.do("GET", "/api/shop/held?ttr=60&timeout=10", tok, ""); code != 200 || body["job_id"] != "h-1" {
		t.Fatalf("consume of h-1: %d %v", code, body)
	}
	waitFor(t, func() (bool, string) {
		code, body := a.do("GET", "/api/shop/q/size", tok, "")
		return code == 200 && body["size"] == float64(len(ids)), fmt.Sprint(code, body)
	})

	for _, q := range []string{"q", "held"} {
		if code, body := a.do("DELETE", "/api/shop/"+q, tok, ""); code != 204 {
			t.Fatalf("destroy %s: %d %v", q, code, body)
		}
	}
	for _, id := range ids {
		waitFor(t, func() (bool, string) {
			code, body := a.do("GET", "/api/shop/q/task/"+id, tok, "")
			task, _ := body["task"].(map[string]any)
			return code == 200 && body["done"] == true && task["state"] == "canceled" && task["reason"] == serve.ReasonDestroyed, fmt.Sprint(code, body)
		})
	}
	code, body := a.do("GET", "/api/shop/q/stats", tok, "")
	if tasks, _ := body["tasks"].(map[string]any); code != 200 || tasks["canceled"] != float64(len(ids)) || tasks["pending"] != nil {
		t.Errorf("stats after the destroy: %d %v; want every task canceled", code, body)
	}
	if code, body := a.do("GET", "/api/shop/q/size", tok, ""); code != 200 || body["size"] != float64(0) {
		t.Errorf("size after the destroy: %d %v", code, body)
	}
	if code, out := a.del("/api/shop/held/job/h-1", tok, "done"); code != 204 || out != "acknowledged" {
		t.Fatalf("ACK of the job handed out: %d %s; want 204 acknowledged", code, out)
	}
	code, body = a.do("GET", "/api/shop/held/task/h-1", tok, "")
	if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "succeeded" {
		t.Errorf("the job handed out before the destroy: %d %v; want it succeeded", code, body)
	}
}

// waitFor waits up to a minute for ok, and fails the test with what it
// last said.
func waitFor(t *testing.T, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		done, said := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %s after a minute", said)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
