package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// api is a test's client of a real HTTP server over a server of the
// package, on an embedded broker.
type api struct {
	t    testing.TB
	url  string
	conn broker.Conn
	srv  *serve.Server
	// close stops the server, as a restart does (tasks handed out stay
	// leased).
	close func()
}

func start(t testing.TB, opts ...serve.Opt) *api {
	t.Helper()
	_, conn := testutil.StartBroker(t, "")
	return startOn(t, conn, opts...)
}

// runWorker runs a worker on a's broker with handler h and opts (its
// queues among them) until the test ends, and fails the test if it
// stopped with an error: a queue made by a publish must exist before it
// starts.
func runWorker(t *testing.T, a *api, h consumer.HandlerFunc, opts ...consumer.Opt) {
	t.Helper()
	w, err := consumer.New(append([]consumer.Opt{consumer.Conn(a.conn), consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(h)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
	})
}

// layouts are the queue layouts of onceq serve that the lmstfy API's
// tests run on: a topic per queue, and every queue on one lane.
var layouts = []struct {
	name string
	opt  serve.Opt
}{{"topics", serve.Lane("")}, {"lane", serve.Lane("lmstfy")}}

// eachLayout runs test on each of layouts, as a subtest; its servers take
// layout.
func eachLayout(t *testing.T, test func(t *testing.T, layout serve.Opt)) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) { test(t, l.opt) })
	}
}

// startOn starts a server on the broker of conn: another server of a
// fleet, or one restarted.
func startOn(t testing.TB, conn broker.Conn, opts ...serve.Opt) *api {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := serve.New(ctx, append([]serve.Opt{serve.Conn(conn), serve.Logger(testutil.FailureLog(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	a := &api{t: t, url: hs.URL, conn: conn, srv: srv}
	a.close = sync.OnceFunc(func() {
		hs.Close()
		srv.Close()
	})
	t.Cleanup(a.close)
	return a
}

func (a *api) token(ns string, readOnly bool) string {
	a.t.Helper()
	tok, _, err := a.srv.Tokens().Create(context.Background(), ns, readOnly, "")
	if err != nil {
		a.t.Fatal(err)
	}
	return tok
}

// do sends a request and returns the status and the decoded JSON body.
func (a *api) do(method, path, token, body string) (int, map[string]any) {
	a.t.Helper()
	return a.doWith(method, path, token, body, nil)
}

// doWith is do with headers of its own.
func (a *api) doWith(method, path, token, body string, header http.Header) (int, map[string]any) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("X-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &out); err != nil {
			a.t.Fatalf("%s %s: %d, body %q is not a JSON object: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode, out
}

// del sends a DELETE of a job and returns the status and what it did
// (the Onceq-Outcome header).
func (a *api) del(path, token, body string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest("DELETE", a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("X-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Onceq-Outcome")
}

// every is one request to each endpoint of namespace ns.
func every(ns string) [][2]string {
	return [][2]string{
		{"GET", "/api/" + ns}, {"PUT", "/api/" + ns + "/q"}, {"POST", "/api/" + ns + "/q/bulk"},
		{"GET", "/api/" + ns + "/q/job/a"}, {"GET", "/api/" + ns + "/q/job/a/wait?timeout=1"}, {"DELETE", "/api/" + ns + "/q/job/a"},
		{"GET", "/api/" + ns + "/q/size"}, {"GET", "/api/" + ns + "/q/stats"}, {"POST", "/api/" + ns + "/q/pause"}, {"POST", "/api/" + ns + "/q/resume"},
		{"GET", "/api/" + ns + "/q/deadletter"}, {"GET", "/api/" + ns + "/q/deadletter/size"}, {"PUT", "/api/" + ns + "/q/deadletter"},
		{"GET", "/api/" + ns + "/q/workflow/a"}, {"GET", "/api/" + ns + "/q/workflow/a/wait?timeout=1"}, {"DELETE", "/api/" + ns + "/q/workflow/a"},
		{"GET", "/periodic/" + ns}, {"GET", "/periodic/" + ns + "/a"}, {"PUT", "/periodic/" + ns + "/a"}, {"DELETE", "/periodic/" + ns + "/a"},
	}
}

// TestAuth: no endpoint but /healthz answers without a token; a token
// of another namespace is refused (403) everywhere; a read-only token
// reads and never writes.
func TestAuth(t *testing.T) {
	a := start(t)
	other := a.token("other", false)
	ro := a.token("shop", true)
	if code, _ := a.do("GET", "/healthz", "", ""); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	for _, r := range append(every("shop"), [2]string{"GET", "/metrics"}, [2]string{"GET", "/nope"}, [2]string{"GET", "/api/openapi.json"}) {
		if code, body := a.do(r[0], r[1], "", ""); code != 401 || !strings.Contains(fmt.Sprint(body["error"]), "no token") {
			t.Errorf("%s %s without a token: %d %v; want 401", r[0], r[1], code, body)
		}
		if code, _ := a.do(r[0], r[1], "oq_0123456789abcdef_"+strings.Repeat("x", 32), ""); code != 401 {
			t.Errorf("%s %s with an unknown token: %d; want 401", r[0], r[1], code)
		}
	}
	for _, r := range every("shop") {
		if code, body := a.do(r[0], r[1], other, ""); code != 403 || !strings.Contains(fmt.Sprint(body["error"]), "opens namespace other, not shop") {
			t.Errorf("%s %s with another namespace's token: %d %v; want 403", r[0], r[1], code, body)
		}
		code, _ := a.do(r[0], r[1], ro, "")
		write := r[0] != "GET"
		if write && code != 403 || !write && (code == 401 || code == 403) {
			t.Errorf("%s %s with a read-only token: %d", r[0], r[1], code)
		}
	}
	// The metrics name every namespace's queues: an operator's token only.
	if code, body := a.do("GET", "/metrics", ro, ""); code != 403 {
		t.Errorf("metrics with a namespace's token: %d %v; want 403", code, body)
	}
	if code, _ := a.do("GET", "/metrics", a.token("*", true), ""); code != 200 {
		t.Errorf("metrics with an operator's token: %d", code)
	}
	if code, body := a.do("GET", "/api/openapi.json", ro, ""); code != 200 || body["openapi"] != "3.0.3" {
		t.Errorf("openapi.json: %d", code)
	}
}

// TestPublishAndAsk: publish with and without an ID (new, then known),
// bulk in one transaction, bad input answered 400 or 413 naming the
// field with nothing written, and a worker's outcome seen through job,
// wait, cancel, stats, size and pause.
func TestPublishAndAsk(t *testing.T) {
	a := start(t, serve.CreateQueues(2), serve.MaxPayloadBytes(1000))
	tok := a.token("shop", false)
	code, body := a.do("PUT", "/api/shop/emails?id=order-1&tries=3&ttl=3600", tok, "hello")
	if code != 201 || body["job_id"] != "order-1" || body["new"] != true {
		t.Fatalf("publish: %d %v", code, body)
	}
	code, body = a.do("PUT", "/api/shop/emails?id=order-1", tok, "again")
	if code != 200 || body["new"] != false || body["state"] != "pending" {
		t.Fatalf("publish of a known ID: %d %v; want 200, pending", code, body)
	}
	code, body = a.do("PUT", "/api/shop/emails", tok, "no id")
	if code != 201 || len(fmt.Sprint(body["job_id"])) != 36 {
		t.Fatalf("publish without an ID: %d %v", code, body)
	}
	code, body = a.do("PUT", "/api/shop/emails?id=later-1&delay=3600", tok, "later")
	if code != 201 || body["delayed"] != true {
		t.Fatalf("delayed publish: %d %v", code, body)
	}
	code, body = a.do("POST", "/api/shop/emails/bulk", tok, `[{"id":"b-1","payload":"x"},{"id":"b-2","payload":{"n":2}},{"payload":"x","queue":"sms"}]`)
	if jobs, _ := body["jobs"].([]any); code != 201 || len(jobs) != 3 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		field              string
	}{
		{"PUT", "/api/shop/emails?delay=soon", "x", 400, "delay"},
		{"PUT", "/api/shop/emails?tries=0", "x", 400, "tries"},
		{"PUT", "/api/shop/emails?ttl=-5", "x", 400, "ttl"},
		{"PUT", "/api/shop/emails?timeout=soon", "x", 400, "timeout"},
		{"PUT", "/api/shop/emails?priority=10", "x", 400, "priority"},
		{"PUT", "/api/shop/emails?id=a%20b", "x", 400, "id"},
		{"PUT", "/api/shop/emails?delay=1&delay=2", "x", 400, "delay"},
		{"PUT", "/api/shop/bad%20queue", "x", 400, "queue"},
		{"PUT", "/api/sh.op/emails", "x", 400, "namespace"},
		{"PUT", "/api/shop/emails", strings.Repeat("x", 1001), 413, "body"},
		{"POST", "/api/shop/emails/bulk", `{"payload":"x"}`, 400, "body"},
		{"POST", "/api/shop/emails/bulk", `[]`, 400, "body"},
		{"POST", "/api/shop/emails/bulk", `[{"id":"ok-1"},{"delay":"x"}]`, 400, "[1].delay"},
		{"POST", "/api/shop/emails/bulk", `[{"id":"ok-2"},{"id":"ok-2"}]`, 400, "id"},
		{"POST", "/api/shop/emails/bulk", `[{"id":"ok-3"},{"bogus":1}]`, 400, "[1]"},
		{"POST", "/api/shop/emails/bulk", `[{"id":"ok-4"},{"payload":"` + strings.Repeat("x", 1001) + `"}]`, 413, "[1].payload"},
		{"GET", "/api/shop/emails/job/a%20b", "", 400, "id"},
		{"GET", "/api/shop/emails/job/x/wait?timeout=0", "", 400, "timeout"},
	} {
		code, body := a.do(tc.method, tc.path, tok, tc.body)
		if code != tc.code || body["field"] != tc.field || body["error"] == "" {
			t.Errorf("%s %s: %d %v; want %d naming %q", tc.method, tc.path, code, body, tc.code, tc.field)
		}
	}
	// Nothing of the refused requests was written: emails holds order-1,
	// the task without ID, b-1 and b-2; sms the bulk's third.
	if recs := testutil.ReadCommitted(t, a.conn, 5*time.Second, "shop.emails"); len(recs) != 4 {
		t.Fatalf("shop.emails holds %d tasks; want 4", len(recs))
	}

	// A worker runs them.
	started := make(chan string, 2)
	w, err := consumer.New(consumer.Conn(a.conn), consumer.Queues("shop.emails"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			if task.ID == "slow" || task.ID == "stubborn" {
				started <- task.ID
				<-ctx.Done()
				if task.ID == "slow" {
					return ctx.Err()
				}
			}
			return task.SetResult(append([]byte("sent "), task.Payload...))
		})), consumer.TaskTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	code, body = a.do("GET", "/api/shop/emails/job/order-1/wait?timeout=60", tok, "")
	task, _ := body["task"].(map[string]any)
	if code != 200 || body["done"] != true || task["state"] != "succeeded" || task["result"] != "c2VudCBoZWxsbw==" {
		t.Fatalf("wait: %d %v; want succeeded with the result", code, body)
	}
	code, body = a.do("GET", "/api/shop/emails/task/order-1", tok, "")
	if code != 200 || body["done"] != true {
		t.Fatalf("job: %d %v", code, body)
	}
	code, body = a.do("PUT", "/api/shop/emails?id=order-1", tok, "again")
	if code != 200 || body["state"] != "succeeded" {
		t.Fatalf("publish of a finished ID: %d %v", code, body)
	}
	// A cancel's status says what it did.
	code, body = a.do("POST", "/api/shop/emails/job/later-1/cancel", tok, "")
	if code != 202 || body["cancel"] != "pending" {
		t.Fatalf("cancel of a delayed task: %d %v; want 202 pending", code, body)
	}
	if code, body = a.do("DELETE", "/api/shop/emails/job/order-1", tok, ""); code != 204 {
		t.Fatalf("DELETE of a finished task: %d %v; want 204 (an ACK is idempotent)", code, body)
	}
	// onceq's cancel says what it did.
	code, body = a.do("POST", "/api/shop/emails/job/order-1/cancel", tok, "")
	if task, _ := body["task"].(map[string]any); code != 409 || body["cancel"] != "final" || task["state"] != "succeeded" {
		t.Fatalf("cancel of a finished task: %d %v; want 409 with its state", code, body)
	}
	if code, body = a.do("POST", "/api/shop/emails/job/never/cancel", tok, ""); code != 404 || body["field"] != "id" || !strings.Contains(fmt.Sprint(body["error"]), "ahead=true") {
		t.Fatalf("cancel of an unknown task: %d %v; want 404 naming ahead=true", code, body)
	}
	if code, body = a.do("POST", "/api/shop/emails/job/never/cancel?ahead=soon", tok, ""); code != 400 || body["field"] != "ahead" {
		t.Fatalf("cancel with a bad ahead: %d %v; want 400", code, body)
	}
	if recs, _ := testutil.ReadCommittedErr(a.conn, 5*time.Second, ctltopic.Topic); len(recs) != 1 {
		t.Fatalf("the control topic holds %d records, want the cancel of later-1 alone", len(recs))
	}
	if code, body = a.do("POST", "/api/shop/emails/job/ahead-1/cancel?ahead=true", tok, ""); code != 202 || body["cancel"] != "ahead" {
		t.Fatalf("cancel ahead: %d %v; want 202 ahead", code, body)
	}
	for id, want := range map[string]int{"slow": 200, "stubborn": 410} {
		if code, body = a.do("PUT", "/api/shop/emails?id="+id, tok, "x"); code != 201 {
			t.Fatalf("publish %s: %d %v", id, code, body)
		}
		<-started
		code, body = a.do("POST", "/api/shop/emails/job/"+id+"/cancel", tok, "")
		if task, _ := body["task"].(map[string]any); code != want || task["state"] == nil {
			t.Fatalf("cancel of running %s: %d %v; want %d with its record", id, code, body, want)
		}
	}
	if code, body = a.do("GET", "/api/shop/emails/task/never", tok, ""); code != 404 || body["field"] != "id" {
		t.Fatalf("job never submitted: %d %v", code, body)
	}
	if code, body = a.do("GET", "/api/shop/emails/job/never/wait?timeout=1", tok, ""); code != 200 || body["done"] != false {
		t.Fatalf("wait past its timeout: %d %v", code, body)
	}
	if code, body = a.do("POST", "/api/shop/emails/pause", tok, ""); code != 200 || body["paused"] != true {
		t.Fatalf("pause: %d %v", code, body)
	}
	code, body = a.do("GET", "/api/shop", tok, "")
	if qs, _ := body["queues"].([]any); code != 200 || fmt.Sprint(qs) != "[map[paused:true queue:emails] map[paused:false queue:sms]]" {
		t.Fatalf("queues: %d %v", code, body)
	}
	// A page at a time.
	code, body = a.do("GET", "/api/shop?limit=1", tok, "")
	if qs, _ := body["queues"].([]any); code != 200 || len(qs) != 1 || body["next"] != "emails" || body["total"] != 2.0 {
		t.Fatalf("queues, page 1: %d %v", code, body)
	}
	code, body = a.do("GET", "/api/shop?limit=1&after=emails", tok, "")
	if qs, _ := body["queues"].([]any); code != 200 || fmt.Sprint(qs) != "[map[paused:false queue:sms]]" || body["next"] != "" || body["prev"] != "sms" {
		t.Fatalf("queues, page 2: %d %v", code, body)
	}
	if code, body = a.do("GET", "/api/shop?limit=0", tok, ""); code != 400 || body["field"] != "limit" {
		t.Fatalf("queues, limit=0: %d %v", code, body)
	}
	code, body = a.do("GET", "/api/shop/emails/stats", tok, "")
	if tasks, _ := body["tasks"].(map[string]any); code != 200 || body["paused"] != true || tasks["succeeded"] == nil {
		t.Fatalf("stats: %d %v", code, body)
	}
	if code, body = a.do("GET", "/api/shop/emails/size", tok, ""); code != 200 || body["size"] == nil {
		t.Fatalf("size: %d %v", code, body)
	}
	if code, _ = a.do("POST", "/api/shop/emails/resume", tok, ""); code != 200 {
		t.Fatalf("resume: %d", code)
	}
}

// TestNoCreateQueues: with CreateQueues(0) a publish to a missing queue
// is 404 and creates nothing.
func TestNoCreateQueues(t *testing.T) {
	a := start(t, serve.CreateQueues(0))
	tok := a.token("shop", false)
	if code, body := a.do("PUT", "/api/shop/missing", tok, "x"); code != 404 || body["field"] != "queue" {
		t.Fatalf("publish to a missing queue: %d %v", code, body)
	}
	testutil.CreateTopic(t, a.conn, "shop.there", 1)
	if code, body := a.do("PUT", "/api/shop/there?id=x", tok, "x"); code != 201 {
		t.Fatalf("publish to an existing queue: %d %v", code, body)
	}
}

// TestRateLimit: a token past its limit is answered 429 with Retry-After;
// another token keeps its own allowance.
func TestRateLimit(t *testing.T) {
	a := start(t, serve.RateLimit(1, 2))
	tok, other := a.token("shop", false), a.token("shop", false)
	for i := range 2 {
		if code, _ := a.do("GET", "/api/shop", tok, ""); code != 200 {
			t.Fatalf("request %d within the burst: %d", i, code)
		}
	}
	req, _ := http.NewRequest("GET", a.url+"/api/shop", nil)
	req.Header.Set("X-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("past the limit: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, _ := a.do("GET", "/api/shop", other, ""); code != 200 {
		t.Fatalf("another token: %d", code)
	}
	// Without tokens, each client address has its own allowance.
	open := start(t, serve.RateLimit(1, 2), serve.InsecureNoAuth(true))
	for i := range 2 {
		if code, _ := open.do("GET", "/api/shop", "", ""); code != 200 {
			t.Fatalf("request %d within the burst, without auth: %d", i, code)
		}
	}
	if code, body := open.do("GET", "/api/shop", "", ""); code != 429 {
		t.Fatalf("past the limit without auth: %d %v; want 429", code, body)
	}
	if _, err := serve.New(context.Background(), serve.RateLimit(5, 0)); !errors.Is(err, serve.ErrConfig) {
		t.Fatalf("a rate without a burst: %v; want ErrConfig", err)
	}
	// A rate that is not a number, infinite, or so low that a wait for
	// the next request overflows a duration, is refused before anything
	// connects, as is a negative burst.
	for _, opt := range []serve.Opt{serve.RateLimit(math.NaN(), 10), serve.RateLimit(math.Inf(1), 10), serve.RateLimit(math.Inf(-1), 10),
		serve.RateLimit(1e-300, 10), serve.RateLimit(0, -1)} {
		if err := serve.Check(opt); !errors.Is(err, serve.ErrConfig) || !strings.Contains(err.Error(), "RateLimit") {
			t.Errorf("Check(%v): %v; want ErrConfig naming RateLimit", opt, err)
		}
	}
}

// TestPublishRoutesByTheClusterLadder: a delayed publish goes to a bucket
// of the cluster's ladder (delay ladder set), which the delay services
// read, not to one of the default ladder.
func TestPublishRoutesByTheClusterLadder(t *testing.T) {
	a := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	short, err := delay.ParseLadder("300ms 3s")
	if err != nil {
		t.Fatal(err)
	}
	if err := delay.SetLadder(ctx, a.conn, short); err != nil {
		t.Fatal(err)
	}
	tok := a.token("shop", false)
	if code, body := a.do("PUT", "/api/shop/emails?id=d-1&delay=2", tok, "later"); code != 201 || body["delayed"] != true {
		t.Fatalf("delayed publish: %d %v", code, body)
	}
	if recs := testutil.ReadCommitted(t, a.conn, 5*time.Second, "onceq-delay-300ms"); len(recs) != 1 {
		t.Fatalf("onceq-delay-300ms holds %d records, want the delayed task", len(recs))
	}
}

// TestDeleteUnrecordedJob: lmstfy's DELETE of a job published without an
// ID and never consumed (it has no record yet) cancels it for real: a
// consume then finds no job, and the job's record ends canceled.
func TestDeleteUnrecordedJob(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	code, body := a.do("PUT", "/api/shop/late", tok, "x")
	if code != 201 {
		t.Fatalf("publish: %d %v", code, body)
	}
	id, _ := body["job_id"].(string)
	if code, out := a.del("/api/shop/late/job/"+id, tok, ""); code != 204 || out != "canceled" {
		t.Fatalf("DELETE of a job not handed out: %d %s; want 204 canceled", code, out)
	}
	if code, body = a.do("GET", "/api/shop/late?timeout=2", tok, ""); code != 404 {
		t.Fatalf("consume after the DELETE: %d %v; want no job", code, body)
	}
	code, body = a.do("GET", "/api/shop/late/job/"+id+"/wait?timeout=30", tok, "")
	if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "canceled" {
		t.Fatalf("the job after its DELETE: %d %v; want canceled", code, body)
	}
}
