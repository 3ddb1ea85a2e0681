package serve_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/serve"
)

// TestLmstfyRequestID: every answer, the API's and the admin API's, an
// error's too, carries an X-Request-ID: the request's own when it gave a
// printable one of at most 128 bytes, a new one otherwise, as lmstfy's
// answers carry one.
func TestLmstfyRequestID(t *testing.T) {
	a := start(t, serve.Lane(serve.DefaultLane))
	tok := a.token("ns", false)
	as := httptest.NewServer(a.srv.AdminHandler())
	t.Cleanup(as.Close)
	admin := as.URL
	ids := map[string]bool{}
	for _, tc := range []struct {
		base, path, token, sent string
		keep                    bool
	}{
		{a.url, "/api/ns/q/size", tok, "", false},
		{a.url, "/api/ns/q/size", tok, "req-1", true},
		{a.url, "/api/ns/q/size", "", "req-2", true}, // 401
		{a.url, "/api/ns/q/size", tok, strings.Repeat("x", 129), false},
		{a.url, "/api/ns/q/size", tok, "two words", false},
		{a.url, "/healthz", "", "", false},
		{admin, "/version", "", "req-3", true}, // 401
	} {
		req, err := http.NewRequest("GET", tc.base+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.token != "" {
			req.Header.Set("X-Token", tc.token)
		}
		if tc.sent != "" {
			req.Header.Set("X-Request-ID", tc.sent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := resp.Header.Get("X-Request-ID")
		switch {
		case tc.keep && got != tc.sent:
			t.Errorf("GET %s with X-Request-ID %q: answered %q, want it kept", tc.path, tc.sent, got)
		case !tc.keep && (got == "" || got == tc.sent || ids[got]):
			t.Errorf("GET %s with X-Request-ID %q: answered %q, want a new one", tc.path, tc.sent, got)
		}
		ids[got] = true
	}
}

// TestLmstfyUnknownParams: lmstfy's routes take query parameters they do not
// know (a newer client's), as lmstfy does, and still check those they
// know; onceq's own routes refuse unknown ones. tries is at most 65535,
// lmstfy's limit.
func TestLmstfyUnknownParams(t *testing.T) {
	a := start(t, serve.Lane(serve.DefaultLane))
	tok := a.token("ns", false)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"PUT", "/api/ns/q?tries=2&shard=7", http.StatusCreated},
		{"PUT", "/api/ns/q?tries=65535", http.StatusCreated},
		{"PUT", "/api/ns/q?tries=65536", http.StatusBadRequest},
		{"PUT", "/api/ns/q?tries=x&shard=7", http.StatusBadRequest},
		{"PUT", "/api/ns/q?tries=1&tries=2", http.StatusBadRequest},
		{"GET", "/api/ns/q/size?shard=7", http.StatusOK},
		{"GET", "/api/ns/q/stats?shard=7", http.StatusBadRequest},
	} {
		if code, body := a.do(tc.method, tc.path, tok, "x"); code != tc.want {
			t.Errorf("%s %s: %d %v, want %d", tc.method, tc.path, code, body, tc.want)
		}
	}
}

// TestLmstfyQueueNames: on a lane, a queue's name may hold '_' as
// lmstfy's may (a lane queue's label is no topic's name); with a topic
// per queue it may not, and the 400 says why.
func TestLmstfyQueueNames(t *testing.T) {
	a := start(t, serve.Lane(serve.DefaultLane))
	c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}
	id := c.publish("my_queue", "", []byte("x"), nil, 0, 1, 0)
	if got := c.consume([]string{"my_queue"}, 1, 30, 10, false); len(got) != 1 || got[0].ID != id || got[0].Queue != "my_queue" {
		t.Fatalf("consume of my_queue: %+v; want job %s", got, id)
	}
	b := start(t, serve.Lane(""))
	code, body := b.do("PUT", "/api/ns/my_queue?"+url.Values{"tries": {"1"}}.Encode(), b.token("ns", false), "x")
	if msg, _ := body["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "write my-queue") {
		t.Errorf("publish to my_queue with a topic per queue: %d %v; want 400 naming my-queue", code, body)
	}
}

// TestLmstfyConsumeFromQueuesOrder: lmstfy's client tests publish to two
// queues and at once consume both, naming the second first, and want the
// second's job: a consume of several queues takes the first named that
// has a job, also while that job is still on its way from Kafka. On the
// lane (the default): with a topic per queue, a new queue's first job
// waits for its topics to be made, longer than the consume waits for it.
func TestLmstfyConsumeFromQueuesOrder(t *testing.T) {
	a := start(t, serve.Lane(serve.DefaultLane), serve.CreateQueues(2))
	c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}
	for i := range 5 {
		first, second := fmt.Sprintf("multi-%d-a", i), fmt.Sprintf("multi-%d-b", i)
		c.publish(first, "", []byte("a"), nil, 0, 1, 0)
		want := c.publish(second, "", []byte("b"), nil, 0, 1, 0)
		got := c.consume([]string{second, first}, 1, 30, 10, false)
		if len(got) != 1 || got[0].ID != want || got[0].Queue != second {
			t.Fatalf("consume of %s,%s: %+v; want %s's job %s", second, first, got, second, want)
		}
	}
}

// TestLmstfyPeekEndedJob: lmstfy's peek of a job (GET .../job/{id})
// answers 404 once the job ended, as lmstfy's finds no job then: after
// its ACK, and, for a dead job, once its dead letter is deleted (while it
// is kept, the peek answers the job). onceq's GET .../task/{id} keeps
// answering its record.
func TestLmstfyPeekEndedJob(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1))
		c := &lmstfyClient{t: t, a: a, ns: "shop", token: a.token("shop", false)}
		var j lmstfyJob
		acked := c.publish("q", "", []byte("acked"), nil, 0, 1, 0)
		if !c.get("q/job/"+acked, &j) || string(j.Data) != "acked" {
			t.Fatalf("peek of the waiting job: %+v; want it with its data", j)
		}
		c.consume([]string{"q"}, 1, 30, 10, false)
		c.ack("q", acked)
		if c.get("q/job/"+acked, &j) {
			t.Errorf("peek after the ACK: %+v; want 404", j)
		}
		dead := c.publish("q", "", []byte("dead"), nil, 0, 1, 0)
		if got := c.consume([]string{"q"}, 1, 1, 10, false); len(got) != 1 || got[0].ID != dead {
			t.Fatalf("consume: %+v; want %s", got, dead)
		}
		waitState(t, a, c.token, "q", dead, "dead") // its ttr passed: dead after its only try
		if !c.get("q/job/"+dead, &j) || string(j.Data) != "dead" {
			t.Errorf("peek of the dead job, its dead letter kept: %+v; want it with its data", j)
		}
		if code, body := c.do("DELETE", "q/deadletter", url.Values{"limit": {"1"}}, nil, nil); code != http.StatusNoContent {
			t.Fatalf("delete of the dead letter: %d %s", code, body)
		}
		if c.get("q/job/"+dead, &j) {
			t.Errorf("peek after the dead letter's delete: %+v; want 404", j)
		}
		for _, id := range []string{acked, dead} {
			if code, body := a.do("GET", "/api/shop/q/task/"+id, c.token, ""); code != http.StatusOK || body["done"] != true {
				t.Errorf("GET .../task/%s: %d %v; want its record", id, code, body)
			}
		}
	})
}

// TestLmstfyPeekExpiredJob: lmstfy's peek of a job whose ttl passed
// (GET .../job/{id}) answers 404, as lmstfy's finds no job then, also
// before any consume of its queue came upon it; onceq's GET .../task/{id}
// still answers.
func TestLmstfyPeekExpiredJob(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1))
		c := &lmstfyClient{t: t, a: a, ns: "shop", token: a.token("shop", false)}
		var j lmstfyJob
		id := c.publish("ttlq", "", []byte("soon gone"), nil, 1, 1, 0)
		published := time.Now()
		kept := c.publish("ttlq", "", []byte("kept"), nil, 3600, 1, 0)
		if !c.get("ttlq/job/"+id, &j) || string(j.Data) != "soon gone" {
			t.Fatalf("peek within its ttl: %+v; want the job", j)
		}
		for time.Since(published) < 1100*time.Millisecond {
			time.Sleep(10 * time.Millisecond) // its ttl of 1 s passes
		}
		if c.get("ttlq/job/"+id, &j) {
			t.Errorf("peek after its ttl: %+v; want 404", j)
		}
		if !c.get("ttlq/job/"+kept, &j) || string(j.Data) != "kept" {
			t.Errorf("peek of a job within its ttl: %+v; want the job", j)
		}
		if code, body := a.do("GET", "/api/shop/ttlq/task/"+id, c.token, ""); code != http.StatusOK {
			t.Errorf("GET .../task/%s: %d %v; want the job", id, code, body)
		}
	})
}
