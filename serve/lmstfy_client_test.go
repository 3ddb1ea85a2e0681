package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// lmstfyJob is a job as lmstfy's Go client decodes it (client.Job).
type lmstfyJob struct {
	Namespace   string `json:"namespace"`
	Queue       string `json:"queue"`
	Data        []byte `json:"data"`
	ID          string `json:"job_id"`
	TTL         int64  `json:"ttl"`
	ElapsedMS   int64  `json:"elapsed_ms"`
	RemainTries int64  `json:"remain_tries"`
	Attributes  map[string]string
}

// lmstfyClient sends requests as lmstfy's Go client builds them
// (client.getReq): the path /api/{ns}/{relative}, the query encoded by
// url.Values, the token in X-Token.
type lmstfyClient struct {
	t     *testing.T
	a     *api
	ns    string
	token string
}

func (c *lmstfyClient) do(method, relative string, query url.Values, body []byte, header http.Header) (int, []byte) {
	c.t.Helper()
	u := c.a.url + path.Join("/api", c.ns, relative)
	if query != nil {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Add("X-Token", c.token)
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// publish is client.publish: PUT {queue}[/job/{ackJobID}] with ttl, tries
// and delay always given, and the attributes as Job-Attr-<KEY> headers
// with Enable-Job-Version: YES.
func (c *lmstfyClient) publish(queue, ackJobID string, data []byte, attrs map[string]string, ttl, tries, delay uint64) string {
	c.t.Helper()
	q := url.Values{}
	q.Add("ttl", strconv.FormatUint(ttl, 10))
	q.Add("tries", strconv.FormatUint(tries, 10))
	q.Add("delay", strconv.FormatUint(delay, 10))
	rel := queue
	if ackJobID != "" {
		rel = path.Join(rel, "job", ackJobID)
	}
	h := http.Header{}
	if len(attrs) > 0 {
		h.Add("Enable-Job-Version", "YES")
		for k, v := range attrs {
			h.Add("Job-Attr-"+strings.ToTitle(k), v)
		}
	}
	code, body := c.do("PUT", rel, q, data, h)
	var out struct {
		JobID string `json:"job_id"`
	}
	if code != http.StatusCreated || json.Unmarshal(body, &out) != nil || out.JobID == "" {
		c.t.Fatalf("publish to %s: %d %s", rel, code, body)
	}
	return out.JobID
}

// consume is client.consume, consumeFromQueues and batchConsume: GET
// {q1,q2}?ttr=&timeout=&freeze_tries= (and count=); 404 is no job; count
// 1 (or none) decodes one object, more an array.
func (c *lmstfyClient) consume(queues []string, count, ttr, timeout uint64, freeze bool) []lmstfyJob {
	c.t.Helper()
	q := url.Values{}
	q.Add("ttr", strconv.FormatUint(ttr, 10))
	if count > 0 {
		q.Add("count", strconv.FormatUint(count, 10))
	}
	q.Add("timeout", strconv.FormatUint(timeout, 10))
	q.Add("freeze_tries", strconv.FormatBool(freeze))
	code, body := c.do("GET", strings.Join(queues, ","), q, nil, nil)
	switch code {
	case http.StatusNotFound:
		return nil
	case http.StatusOK:
	default:
		c.t.Fatalf("consume %v: %d %s", queues, code, body)
	}
	if count <= 1 {
		var j lmstfyJob
		if err := json.Unmarshal(body, &j); err != nil {
			c.t.Fatalf("consume %v: %s: %v", queues, body, err)
		}
		return []lmstfyJob{j}
	}
	var jobs []lmstfyJob
	if err := json.Unmarshal(body, &jobs); err != nil {
		c.t.Fatalf("consume %v: %s: %v", queues, body, err)
	}
	return jobs
}

// ack is client.Ack: DELETE {queue}/job/{id}, 204.
func (c *lmstfyClient) ack(queue, id string) {
	c.t.Helper()
	if code, body := c.do("DELETE", path.Join(queue, "job", id), nil, nil, nil); code != http.StatusNoContent {
		c.t.Fatalf("ack of %s: %d %s", id, code, body)
	}
}

// get decodes a 200 answer of GET {relative} into v; false on 404.
func (c *lmstfyClient) get(relative string, v any) bool {
	c.t.Helper()
	code, body := c.do("GET", relative, nil, nil, nil)
	if code == http.StatusNotFound {
		return false
	}
	if code != http.StatusOK || json.Unmarshal(body, v) != nil {
		c.t.Fatalf("GET %s: %d %s", relative, code, body)
	}
	return true
}

func (c *lmstfyClient) size(queue string) int {
	c.t.Helper()
	var out struct {
		Namespace, Queue string
		Size             int `json:"size"`
	}
	if !c.get(path.Join(queue, "size"), &out) {
		c.t.Fatalf("size of %s: 404", queue)
	}
	return out.Size
}

// waitSize waits for the size of queue to be want.
func (c *lmstfyClient) waitSize(queue string, want int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for got := c.size(queue); got != want; got = c.size(queue) {
		if time.Now().After(deadline) {
			c.t.Fatalf("size of %s: %d; want %d", queue, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHandlers waits for the pull worker to run n handlers: tasks held
// for the consumers or handed out, of every queue (the worker's metrics
// are not per queue).
func (a *api) waitHandlers(n int) {
	a.t.Helper()
	op := a.token("*", true)
	want := fmt.Sprintf("onceq_inflight_tasks{queue=\"*\"} %d\n", n)
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", a.url+"/metrics", nil)
		req.Header.Set("X-Token", op)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			a.t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("no %q in the metrics", strings.TrimSpace(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *lmstfyClient) deadLetter(queue string) (int, string) {
	c.t.Helper()
	var out struct {
		DeadLetterSize int    `json:"deadletter_size"`
		DeadLetterHead string `json:"deadletter_head"`
	}
	if !c.get(path.Join(queue, "deadletter"), &out) {
		c.t.Fatalf("dead letters of %s: 404", queue)
	}
	return out.DeadLetterSize, out.DeadLetterHead
}

// TestLmstfyClientPublishConsumeAck: Publish, PublishJob (attributes),
// BatchPublish, Consume, BatchConsume (count 1: an object, more: an
// array), ConsumeFromQueues (the first queue first), Ack (204, again 204,
// an unknown ID 204), QueueSize (a queue never consumed too), PeekQueue
// and PeekJob (with the data), RePublish, and lmstfy's defaults.
func TestLmstfyClientPublishConsumeAck(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(2))
		c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}

		// A queue never consumed: its size, its peek (404) and a job's peek.
		id1 := c.publish("q1", "", []byte("hello"), nil, 0, 3, 0)
		c.waitSize("q1", 1)
		var peeked lmstfyJob
		if !c.get("q1/peek", &peeked) || peeked.ID != id1 || string(peeked.Data) != "hello" || peeked.RemainTries != 3 || peeked.TTL != 0 {
			t.Fatalf("PeekQueue: %+v", peeked)
		}
		if !c.get("q1/job/"+id1, &peeked) || peeked.ID != id1 || string(peeked.Data) != "hello" || peeked.Queue != "q1" || peeked.Namespace != "ns" {
			t.Fatalf("PeekJob: %+v", peeked)
		}
		if c.get("q1/job/nope", &peeked) {
			t.Fatal("PeekJob of an unknown job: 200; want 404")
		}
		if c.get("empty/peek", &peeked) {
			t.Fatal("PeekQueue of an empty queue: 200; want 404")
		}
		if n := c.size("never"); n != 0 {
			t.Fatalf("size of a queue that does not exist: %d", n)
		}

		// Consume: one object, with the data, tries spent, ttl.
		got := c.consume([]string{"q1"}, 0, 30, 10, false)
		if len(got) != 1 || got[0].ID != id1 || string(got[0].Data) != "hello" || got[0].RemainTries != 2 || got[0].Namespace != "ns" || got[0].Queue != "q1" {
			t.Fatalf("Consume: %+v", got)
		}
		c.waitSize("q1", 0)
		if !c.get("q1/job/"+id1, &peeked) || peeked.RemainTries != 2 {
			t.Fatalf("PeekJob of a job handed out: %+v", peeked)
		}
		c.ack("q1", id1)
		c.ack("q1", id1)    // again: 204
		c.ack("q1", "nope") // unknown: 204
		if got := c.consume([]string{"q1"}, 0, 30, 0, false); got != nil {
			t.Fatalf("Consume of an empty queue: %+v; want nil (404)", got)
		}

		// lmstfy's defaults: 1 try, a ttl of a day.
		code, body := c.do("PUT", "q2", nil, []byte("defaults"), nil)
		if code != 201 {
			t.Fatalf("publish without parameters: %d %s", code, body)
		}
		got = c.consume([]string{"q2"}, 0, 30, 10, false)
		if len(got) != 1 || got[0].RemainTries != 0 || got[0].TTL < 86390 || got[0].TTL > 86400 {
			t.Fatalf("a job published without tries and ttl: %+v; want 0 tries left, a day to live", got)
		}
		c.ack("q2", got[0].ID)

		// PublishJob with attributes; they come back on consume and peek.
		idA := c.publish("q2", "", []byte(`{"a":1}`), map[string]string{"Color": "red", "size": "L"}, 600, 2, 0)
		got = c.consume([]string{"q2"}, 0, 30, 10, false)
		if len(got) != 1 || got[0].ID != idA || fmt.Sprint(got[0].Attributes) != "map[color:red size:L]" || got[0].TTL > 600 || got[0].TTL < 590 {
			t.Fatalf("consume of a job with attributes: %+v", got)
		}
		// RePublish: the job is acknowledged and published again with a new ID.
		idR := c.publish("q2", idA, []byte("again"), nil, 0, 1, 0)
		if idR == idA {
			t.Fatalf("RePublish answered the same ID %s", idR)
		}
		got = c.consume([]string{"q2"}, 0, 30, 10, false)
		if len(got) != 1 || got[0].ID != idR || string(got[0].Data) != "again" {
			t.Fatalf("consume of the republished job: %+v", got)
		}
		c.ack("q2", idR)
		code, rec := a.do("GET", "/api/ns/q2/task/"+idA, c.token, "")
		if task, _ := rec["task"].(map[string]any); code != 200 || task["state"] != "succeeded" {
			t.Fatalf("the job republished: %d %v; want succeeded", code, rec)
		}
		if code, rec := a.do("GET", "/api/ns/q2/job/"+idA, c.token, ""); code != 404 {
			t.Fatalf("lmstfy's peek of the job republished: %d %v; want 404, as lmstfy's", code, rec)
		}

		// BatchPublish: lmstfy's body, each element a job's data.
		q := url.Values{}
		q.Add("ttl", "0")
		q.Add("tries", "1")
		q.Add("delay", "0")
		data, _ := json.Marshal([]any{map[string]int{"n": 1}, "two", 3})
		code, raw := c.do("PUT", "q3/bulk", q, data, nil)
		var bulk struct {
			JobIDs []string `json:"job_ids"`
		}
		if code != 201 || json.Unmarshal(raw, &bulk) != nil || len(bulk.JobIDs) != 3 {
			t.Fatalf("BatchPublish: %d %s", code, raw)
		}
		c.waitSize("q3", 3)
		// BatchConsume with count=1 answers an object, count>1 an array.
		got = c.consume([]string{"q3"}, 1, 30, 10, false)
		if len(got) != 1 {
			t.Fatalf("BatchConsume count=1: %+v", got)
		}
		seen := map[string]string{got[0].ID: string(got[0].Data)}
		for len(seen) < 3 {
			jobs := c.consume([]string{"q3"}, 5, 30, 10, false)
			if len(jobs) == 0 {
				t.Fatalf("BatchConsume: none, after %v", seen)
			}
			for _, j := range jobs {
				seen[j.ID] = string(j.Data)
			}
		}
		if fmt.Sprint([]string{seen[bulk.JobIDs[0]], seen[bulk.JobIDs[1]], seen[bulk.JobIDs[2]]}) != `[{"n":1} "two" 3]` {
			t.Fatalf("the bulk's jobs: %v", seen)
		}
		for id := range seen {
			c.ack("q3", id)
		}

		// ConsumeFromQueues: several queues, the first first, once both
		// queues' workers hold their job for the consumers.
		testutil.CreateTopic(t, a.conn, "ns.high", 2) // a consume makes no queue
		testutil.CreateTopic(t, a.conn, "ns.low", 2)
		if got := c.consume([]string{"high", "low"}, 0, 30, 0, false); got != nil { // starts their workers
			t.Fatalf("consume of empty queues: %+v", got)
		}
		idLow := c.publish("low", "", []byte("low"), nil, 0, 1, 0)
		idHigh := c.publish("high", "", []byte("high"), nil, 0, 1, 0)
		a.waitHandlers(2) // one of each queue
		for _, want := range []string{idHigh, idLow} {
			got = c.consume([]string{"high", "low"}, 0, 30, 10, false)
			if len(got) != 1 || got[0].ID != want {
				t.Fatalf("ConsumeFromQueues: %+v; want %s", got, want)
			}
			c.ack(got[0].Queue, got[0].ID)
		}
	})
}

// TestLmstfyClientFreezeTries: a consume with freeze_tries spends no try:
// a job of one try taken with it and not acknowledged comes back, with
// its try, and a consume without it then spends it.
func TestLmstfyClientFreezeTries(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1))
		c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}
		id := c.publish("q", "", []byte("x"), nil, 0, 1, 0)
		got := c.consume([]string{"q"}, 0, 1, 10, true)
		if len(got) != 1 || got[0].ID != id || got[0].RemainTries != 1 {
			t.Fatalf("ConsumeWithFreezeTries: %+v; want the job, 1 try left", got)
		}
		// Its ttr passes unacknowledged: it comes back, its try unspent.
		got = c.consume([]string{"q"}, 0, 1, 30, true)
		if len(got) != 1 || got[0].ID != id || got[0].RemainTries != 1 {
			t.Fatalf("ConsumeWithFreezeTries again: %+v; want the job back, 1 try left", got)
		}
		got = c.consume([]string{"q"}, 0, 30, 30, false)
		if len(got) != 1 || got[0].ID != id || got[0].RemainTries != 0 {
			t.Fatalf("Consume after freezes: %+v; want the job, its last try spent", got)
		}
		c.ack("q", id)
	})
}

// TestLmstfyClientDeadLetters: PeekDeadLetter, RespawnDeadLetter (limit,
// ttl) and DeleteDeadLetter, and the size of the dead letters.
func TestLmstfyClientDeadLetters(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1))
		c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}
		if n, head := c.deadLetter("q"); n != 0 || head != "" {
			t.Fatalf("PeekDeadLetter of a queue without: %d %q", n, head)
		}
		var ids []string
		for i := range 3 {
			ids = append(ids, c.publish("q", "", []byte{byte('a' + i)}, nil, 0, 1, 0))
		}
		// Each consumed once and not acknowledged: dead after its ttr.
		for range 3 {
			if got := c.consume([]string{"q"}, 0, 1, 10, false); len(got) != 1 {
				t.Fatalf("consume: %+v", got)
			}
		}
		deadline := time.Now().Add(60 * time.Second)
		n, head := c.deadLetter("q")
		for ; n != 3 && time.Now().Before(deadline); n, head = c.deadLetter("q") {
			time.Sleep(100 * time.Millisecond)
		}
		// Dead letters are in the order the jobs died (onceq's order is per
		// key, not per queue).
		if n != 3 || !slices.Contains(ids, head) {
			t.Fatalf("PeekDeadLetter: %d, head %q; want 3, one of %v", n, head, ids)
		}
		first := head
		var size struct{ Size int }
		if !c.get("q/deadletter/size", &size) || size.Size != 3 {
			t.Fatalf("dead letter size: %+v", size)
		}
		// RespawnDeadLetter(limit 1, ttl 60): the head goes back.
		q := url.Values{}
		q.Add("limit", "1")
		q.Add("ttl", "60")
		code, body := c.do("PUT", "q/deadletter", q, nil, nil)
		var respawned struct{ Count int }
		if code != 200 || json.Unmarshal(body, &respawned) != nil || respawned.Count != 1 {
			t.Fatalf("RespawnDeadLetter: %d %s", code, body)
		}
		if n, head = c.deadLetter("q"); n != 2 || head == first || !slices.Contains(ids, head) {
			t.Fatalf("PeekDeadLetter after a respawn: %d %q", n, head)
		}
		second := head
		got := c.consume([]string{"q"}, 0, 30, 30, false)
		if len(got) != 1 || got[0].ID != first || got[0].TTL > 60 || got[0].TTL < 50 || got[0].RemainTries != 0 {
			t.Fatalf("consume of the respawned job: %+v; want %s", got, first)
		}
		c.ack("q", first)
		// DeleteDeadLetter(limit 1): 204, the head is gone.
		q = url.Values{}
		q.Add("limit", "1")
		if code, body := c.do("DELETE", "q/deadletter", q, nil, nil); code != 204 {
			t.Fatalf("DeleteDeadLetter: %d %s", code, body)
		}
		if n, head = c.deadLetter("q"); n != 1 || head == first || head == second {
			t.Fatalf("PeekDeadLetter after a delete: %d %q", n, head)
		}
		// Destroy (lmstfy's server API): the backlog is gone.
		c.publish("q", "", []byte("d"), nil, 0, 1, 0)
		c.waitSize("q", 1)
		if code, body := c.do("DELETE", "q", nil, nil, nil); code != 204 {
			t.Fatalf("destroy: %d %s", code, body)
		}
		if n := c.size("q"); n != 0 {
			t.Fatalf("size after destroy: %d", n)
		}
	})
}

// TestLmstfyParams: every query parameter lmstfy's server takes is taken,
// on each of its endpoints, with lmstfy's token parameter too.
func TestLmstfyParams(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1))
		tok := a.token("ns", false)
		id := ""
		for _, tc := range []struct {
			method, path, body string
			code               int
		}{
			{"PUT", "/api/ns/q?delay=0&ttl=60&tries=2", "x", 201},
			{"PUT", "/api/ns/q/bulk?delay=0&ttl=60&tries=2", `["a","b"]`, 201},
			{"GET", "/api/ns/q?ttr=30&timeout=1&count=1&freeze_tries=false", "", 200},
			{"GET", "/api/ns/q,r?ttr=30&timeout=1&freeze_tries=true", "", 200},
			{"PUT", "/api/ns/q/job/{id}?delay=0&ttl=60&tries=2", "y", 201},
			{"GET", "/api/ns/q/peek", "", 200},
			{"GET", "/api/ns/q/size", "", 200},
			{"GET", "/api/ns/q/deadletter", "", 200},
			{"GET", "/api/ns/q/deadletter/size", "", 200},
			{"PUT", "/api/ns/q/deadletter?limit=2&ttl=60", "", 200},
			{"DELETE", "/api/ns/q/deadletter?limit=2", "", 204},
			{"DELETE", "/api/ns/q/job/{id}", "", 204},
			{"DELETE", "/api/ns/q", "", 204},
		} {
			path := strings.ReplaceAll(tc.path, "{id}", id)
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			code, body := a.do(tc.method, path+sep+"token="+tok, "", tc.body)
			if code != tc.code {
				t.Fatalf("%s %s: %d %v; want %d", tc.method, path, code, body, tc.code)
			}
			if tc.method == "GET" && id == "" && strings.Contains(path, "ttr=") {
				id, _ = body["job_id"].(string)
			}
		}
	})
}

// TestLmstfyClientConsumeAtOnce: what lmstfy's own client tests do first
// thing (client_test.go's Consume, Ack and dead-letter tests): publish,
// then consume at once with timeout 0. The job is on its way from Kafka
// to the pull worker; the consume waits ImmediateWait for it rather than
// answering 404. A job republished with ttl 10 and consumed at once
// answers ttl 10, rounded as Redis's TTL is. An empty queue answers 404.
//
// On Apache Kafka, with a topic per queue, the first job of a queue the
// publish made reaches the server in 0.2-0.5 s (the queue's changelog and
// records topics are made, its partition restored), past ImmediateWait:
// that layout is left out there (docs/http-api.md).
func TestLmstfyClientConsumeAtOnce(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(2))
		c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}
		for i := range 3 {
			q := fmt.Sprintf("at-once-%d", i)
			id := c.publish(q, "", []byte("hello"), nil, 0, 1, 0)
			got := c.consume([]string{q}, 0, 10, 0, false)
			if len(got) != 1 || got[0].ID != id || string(got[0].Data) != "hello" {
				t.Fatalf("consume with timeout 0 right after the publish to %s: %+v; want job %s", q, got, id)
			}
			again := c.publish(q, got[0].ID, got[0].Data, nil, 10, 1, 0) // RePublish: ttl 10
			got = c.consume([]string{q}, 0, 10, 0, false)
			if len(got) != 1 || got[0].ID != again || got[0].TTL != 10 {
				t.Fatalf("consume of the republished job: %+v; want job %s with ttl 10", got, again)
			}
		}
		if got := c.consume([]string{"at-once-0"}, 0, 10, 0, false); len(got) != 0 {
			t.Fatalf("consume of an empty queue: %+v; want none (404)", got)
		}
	})
}
