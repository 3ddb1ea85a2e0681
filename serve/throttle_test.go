package serve_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/serve"
)

// call sends a request with token and returns the status, the header and
// the body.
func call(t testing.TB, method, url, token, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// adminAPI is a test's client of a server's admin API, with an
// operator's token.
type adminAPI struct {
	t       testing.TB
	url, op string
}

func adminOf(t testing.TB, a *api) *adminAPI {
	hs := httptest.NewServer(a.srv.AdminHandler())
	t.Cleanup(hs.Close)
	return &adminAPI{t, hs.URL, a.token("*", false)}
}

func (ad *adminAPI) call(method, path, body string) (int, []byte) {
	ad.t.Helper()
	code, _, b := call(ad.t, method, ad.url+path, ad.op, body)
	return code, b
}

// limitView is a GET of a token's limit.
type limitView struct {
	auth.Limit
	Used map[string]int64
}

// limit GETs the limit of token id of namespace ns: ok false on a 404.
func (ad *adminAPI) limit(ns, id string) (v limitView, ok bool) {
	ad.t.Helper()
	code, b := ad.call("GET", "/token/"+ns+"/"+id+"/limit", "")
	if code == http.StatusNotFound {
		return v, false
	}
	if code != http.StatusOK || json.Unmarshal(b, &v) != nil {
		ad.t.Fatalf("GET the limit of %s: %d %s", id, code, b)
	}
	return v, true
}

// roomInWindow waits, if need be, until at least room is left of the
// current window of interval seconds, so that a test's requests fall in
// one window of its limit.
func roomInWindow(t testing.TB, interval int64, room time.Duration) {
	end := time.Unix((time.Now().Unix()/interval+1)*interval, 0)
	if left := time.Until(end); left < room {
		t.Logf("waiting %v for the next window of %d s", left, interval)
		time.Sleep(left)
	}
}

// day is the interval of the tests' limits whose requests must fall in
// one window (roomInWindow): auth.MaxLimitInterval.
const day = auth.MaxLimitInterval

// idOf is a token's ID.
func idOf(tok string) string { return tok[3:19] }

// TestTokenLimitAdmin: lmstfy's throttler API on the admin port: POST
// sets a limit (201, 409 when it has one), PUT replaces it, GET reads it
// (404 for none), DELETE lifts it (200, also when it has none) and GET
// /limits lists them; the token is named by its ID, the token itself or
// lmstfy's default:<token>, and must be of the path's namespace; every
// bad request is a 4xx naming its field, with nothing written.
func TestTokenLimitAdmin(t *testing.T) {
	a := start(t)
	ad := adminOf(t, a)
	shop := a.token("shop", false)
	path := "/token/shop/" + idOf(shop) + "/limit"
	if _, ok := ad.limit("shop", idOf(shop)); ok {
		t.Fatal("a new token has a limit")
	}
	if code, _ := ad.call("GET", "/limits", ""); code != 200 {
		t.Fatalf("GET /limits of none: %d", code)
	}
	for _, bad := range []struct {
		path, body string
		code       int
		field      string
	}{
		{path, `{"read":1,"write":1,"interval":1,"burst":2}`, 400, "burst"},
		{path, `{"read":-1,"write":1,"interval":1}`, 400, "read"},
		{path, `{"read":1,"write":-5,"interval":1}`, 400, "write"},
		{path, `{"read":1,"write":1,"interval":0}`, 400, "interval"},
		{path, `{"read":1,"write":1}`, 400, "interval"},
		{path, `{"read":1,"write":1,"interval":86401}`, 400, "interval"},
		{path, `{"read":0,"write":0,"interval":10}`, 400, "read"},
		{path, `{"read":"1","write":1,"interval":1}`, 400, "read"},
		{path, `{"read":1.5,"write":1,"interval":1}`, 400, "read"},
		{path, ``, 400, "body"},
		{path, `{"read":1,"write":1,"interval":1} {}`, 400, "body"},
		{path, `{"read":1,"write":1,"interval":1` + strings.Repeat(" ", 2000) + `}`, 413, "body"},
		{path + "?pool=other", `{"read":1,"write":1,"interval":1}`, 400, "pool"},
		{path + "?force=1", `{"read":1,"write":1,"interval":1}`, 400, "force"},
		{"/token/other/" + idOf(shop) + "/limit", `{"read":1,"write":1,"interval":1}`, 404, "id"},
		{"/token/shop/0123456789abcdef/limit", `{"read":1,"write":1,"interval":1}`, 404, "id"},
		{"/token/shop/xyz/limit", `{"read":1,"write":1,"interval":1}`, 400, "id"},
		{"/token/sh.op/" + idOf(shop) + "/limit", `{"read":1,"write":1,"interval":1}`, 400, "namespace"},
	} {
		for _, method := range []string{"POST", "PUT"} {
			code, b := ad.call(method, bad.path, bad.body)
			var body map[string]string
			_ = json.Unmarshal(b, &body)
			if code != bad.code || body["field"] != bad.field || body["error"] == "" {
				t.Errorf("%s %s %.60q: %d %s; want %d naming %s", method, bad.path, bad.body, code, b, bad.code, bad.field)
			}
			if _, ok := ad.limit("shop", idOf(shop)); ok {
				t.Fatalf("%s %s %.60q was refused and wrote a limit", method, bad.path, bad.body)
			}
		}
	}
	if code, _, _ := call(t, "POST", ad.url+path, shop, `{"read":1,"write":1,"interval":1}`); code != 403 {
		t.Errorf("POST with a namespace's token: %d; want 403", code)
	}

	code, b := ad.call("POST", "/token/shop/default:"+shop+"/limit", `{"read":100,"write":200,"interval":10}`)
	if code != 201 || strings.TrimSpace(string(b)) != `{"limiter":{"read":100,"write":200,"interval":10}}` {
		t.Fatalf("POST by the token, lmstfy's default: prefixed: %d %s; want 201 and the limiter", code, b)
	}
	if code, b := ad.call("POST", path, `{"read":1,"write":1,"interval":1}`); code != 409 || !strings.Contains(string(b), "PUT replaces it") {
		t.Errorf("POST of a token that has a limit: %d %s; want 409", code, b)
	}
	if v, ok := ad.limit("shop", idOf(shop)); !ok || v.Limit != (auth.Limit{Read: 100, Write: 200, Interval: 10}) || v.Used["read"] != 0 || v.Used["write"] != 0 {
		t.Errorf("GET: %+v, %v; want the limit, none of it used", v, ok)
	}
	if code, b := ad.call("PUT", "/token/shop/"+shop+"/limit", `{"read":0,"write":5,"interval":60}`); code != 200 || strings.TrimSpace(string(b)) != `{"limiter":{"read":0,"write":5,"interval":60}}` {
		t.Errorf("PUT: %d %s", code, b)
	}
	code, b = ad.call("GET", "/limits?force_update=true", "")
	var limits []map[string]any
	if code != 200 || json.Unmarshal(b, &limits) != nil || len(limits) != 1 || limits[0]["namespace"] != "shop" || limits[0]["token"] != idOf(shop) ||
		fmt.Sprint(limits[0]["limiter"]) != "map[interval:60 read:0 write:5]" {
		t.Errorf("GET /limits: %d %s; want [{namespace, token, limiter}]", code, b)
	}
	if code, b := ad.call("GET", "/token/shop", ""); code != 200 || !strings.Contains(string(b), `"limit":{"read":0,"write":5,"interval":60}`) {
		t.Errorf("the namespace's tokens: %d %s; want the token's limit", code, b)
	}
	for range 2 { // lifting no limit succeeds too, as lmstfy's
		if code, b := ad.call("DELETE", path, ""); code != 200 || strings.TrimSpace(string(b)) != `{"msg":"success"}` {
			t.Errorf("DELETE: %d %s", code, b)
		}
	}
	if _, ok := ad.limit("shop", idOf(shop)); ok {
		t.Error("GET after DELETE: a limit")
	}
	if code, b := ad.call("GET", "/limits", ""); code != 200 || strings.TrimSpace(string(b)) != `[]` {
		t.Errorf("GET /limits after DELETE: %d %s; want []", code, b)
	}
	if code, b := ad.call("GET", "/limits?force_update=maybe", ""); code != 400 {
		t.Errorf("GET /limits?force_update=maybe: %d %s; want 400", code, b)
	}
}

// TestTokenLimitCounts: a token limited to N publishes and M consumes in
// an interval has the N+1-th publish (or lmstfy bulk) and the M+1-th
// consume of the window answered 429, with Retry-After and lmstfy's body
// and series; another token is not limited; a publish or consume that
// failed gives its count back; once the window passed, publishes pass
// again.
func TestTokenLimitCounts(t *testing.T) {
	a := start(t, serve.Lane(serve.DefaultLane), serve.CreateQueues(1))
	ad := adminOf(t, a)
	tok, free := a.token("shop", false), a.token("shop", false)
	if code, b := ad.call("POST", "/token/shop/"+idOf(tok)+"/limit", fmt.Sprintf(`{"read":1,"write":2,"interval":%d}`, day)); code != 201 {
		t.Fatalf("POST the limit: %d %s", code, b)
	}
	roomInWindow(t, day, 2*time.Minute)
	for range 3 {
		if code, _ := a.do("PUT", "/api/shop/q?tries=x", tok, "job"); code != 400 {
			t.Fatalf("a bad publish: %d; want 400", code)
		}
		if code, _ := a.do("GET", "/api/shop/q?timeout=0", tok, ""); code != 404 {
			t.Fatalf("a consume of an empty queue: %d; want 404", code)
		}
	}
	for i := range 2 {
		if code, body := a.do("PUT", "/api/shop/q", tok, "job"); code != 201 {
			t.Fatalf("publish %d of 2: %d %v", i+1, code, body)
		}
	}
	for _, req := range [][3]string{{"PUT", "/api/shop/q", "job"}, {"PUT", "/api/shop/q/bulk", `["a"]`}} {
		code, header, b := call(t, req[0], a.url+req[1], tok, req[2])
		var body map[string]string
		retry, _ := strconv.Atoi(header.Get("Retry-After"))
		if code != 429 || json.Unmarshal(b, &body) != nil || retry < 1 || retry > day ||
			body["msg"] != "token("+idOf(tok)+") produce reach the limit rate, please retry later" || !strings.Contains(body["error"], "2 publishes every 86400 s") {
			t.Errorf("%s %s past the limit: %d, Retry-After %q, %s; want 429 with lmstfy's msg", req[0], req[1], code, header.Get("Retry-After"), b)
		}
	}
	if code, _ := a.do("PUT", "/api/shop/q", free, "job"); code != 201 {
		t.Errorf("a publish of a token without a limit: %d", code)
	}
	if code, _ := a.do("GET", "/api/shop/q?timeout=30", tok, ""); code != 200 {
		t.Fatalf("the consume the limit allows: %d", code)
	}
	if code, _, b := call(t, "GET", a.url+"/api/shop/q?timeout=0", tok, ""); code != 429 || !strings.Contains(string(b), "consume reach the limit rate") {
		t.Errorf("a consume past the limit: %d %s", code, b)
	}
	if v, _ := ad.limit("shop", idOf(tok)); v.Used["read"] != 1 || v.Used["write"] != 2 {
		t.Errorf("used: %v; want read 1, write 2", v.Used)
	}
	metrics := scrape(t, ad.url+"/metrics", ad.op)
	for _, want := range []string{
		`infra_lmstfy_http_rate_limit{action="produce",namespace="shop",pool="default",token="` + idOf(tok) + `"} 2`,
		`infra_lmstfy_http_rate_limit{action="consume",namespace="shop",pool="default",token="` + idOf(tok) + `"} 1`,
		`onceq_http_token_limit_refusals_total{route="publish"} 1`,
		`onceq_http_token_limit_refusals_total{route="bulk_lmstfy"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}

	// A window of a second: refused within one, passing in the next.
	if code, b := ad.call("PUT", "/token/shop/"+idOf(tok)+"/limit", `{"read":0,"write":2,"interval":1}`); code != 200 {
		t.Fatalf("PUT the limit: %d %s", code, b)
	}
	var refused time.Time
	waitFor(t, func() (bool, string) {
		before := time.Now()
		code, header, _ := call(t, "PUT", a.url+"/api/shop/q", tok, "job")
		if code == 429 && header.Get("Retry-After") == "1" {
			refused = before
			return true, ""
		}
		return false, fmt.Sprintf("publishes answered %d, Retry-After %q; want 429, 1", code, header.Get("Retry-After"))
	})
	waitFor(t, func() (bool, string) {
		code, _ := a.do("PUT", "/api/shop/q", tok, "job")
		return code == 201, fmt.Sprintf("a publish after the refusal answers %d", code)
	})
	if next := time.Unix(refused.Unix()+1, 0); time.Now().Before(next) {
		t.Errorf("a publish passed before the refused one's window ended (%v)", next)
	}
}

// TestTokenLimitFleet: two servers share a token's limit through their
// usage reports: in turn, each seeing the other's count, they admit the
// limit exactly; at once, each admits at most the limit, together at
// least the limit and at most the documented overrun past it (what the
// other admitted before its report came: here, at most the limit); a
// DELETE on one lifts the limit on both.
func TestTokenLimitFleet(t *testing.T) {
	a := start(t)
	b := startOn(t, a.conn)
	adA, adB := adminOf(t, a), adminOf(t, b)
	tok, burst := a.token("shop", false), a.token("shop", false)
	const limit = 6
	for _, id := range []string{idOf(tok), idOf(burst)} {
		if code, body := adA.call("POST", "/token/shop/"+id+"/limit", fmt.Sprintf(`{"read":0,"write":%d,"interval":%d}`, limit, day)); code != 201 {
			t.Fatalf("POST the limit: %d %s", code, body)
		}
		waitFor(t, func() (bool, string) {
			_, ok := adB.limit("shop", id)
			return ok, "the second server knows no limit"
		})
	}
	roomInWindow(t, day, 2*time.Minute)
	publish := func(s *api, token string) int {
		code, _, _ := call(t, "PUT", s.url+"/api/shop/q", token, "job")
		return code
	}
	used := func(ad *adminAPI, id string, want int64) {
		t.Helper()
		waitFor(t, func() (bool, string) {
			v, _ := ad.limit("shop", id)
			return v.Used["write"] == want, fmt.Sprintf("a server counts %d publishes; want %d", v.Used["write"], want)
		})
	}

	for i := range 4 {
		if code := publish(a, tok); code != 201 {
			t.Fatalf("publish %d on the first server: %d", i+1, code)
		}
	}
	used(adB, idOf(tok), 4)
	for i, want := range []int{201, 201, 429} {
		if code := publish(b, tok); code != want {
			t.Fatalf("publish %d on the second server: %d; want %d", i+1, code, want)
		}
	}
	used(adA, idOf(tok), limit)
	if code := publish(a, tok); code != 429 {
		t.Fatalf("a publish on the first server past the limit: %d", code)
	}

	// Both at once: each admits at most the limit.
	admitted := map[*api]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range []*api{a, b} {
		wg.Go(func() {
			for range 2 * limit {
				if code := publish(s, burst); code == 201 {
					mu.Lock()
					admitted[s]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	total := admitted[a] + admitted[b]
	if admitted[a] > limit || admitted[b] > limit || total < limit {
		t.Fatalf("at once, the servers admitted %d and %d; want each at most %d and together at least %d", admitted[a], admitted[b], limit, limit)
	}
	used(adA, idOf(burst), int64(total))
	used(adB, idOf(burst), int64(total))
	if publish(a, burst) != 429 || publish(b, burst) != 429 {
		t.Fatalf("a publish once both servers know the %d admitted: want 429 on both", total)
	}
	t.Logf("at once, the servers admitted %d and %d of a limit of %d", admitted[a], admitted[b], limit)

	if code, body := adA.call("DELETE", "/token/shop/"+idOf(tok)+"/limit", ""); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if code := publish(a, tok); code != 201 {
		t.Errorf("a publish on the server that lifted the limit: %d", code)
	}
	waitFor(t, func() (bool, string) {
		code := publish(b, tok)
		return code == 201, fmt.Sprintf("the other server answers %d", code)
	})
}

// TestTokenLimitRestart: a token's limit and its count survive a
// server's restart: they are in the token store's topic.
func TestTokenLimitRestart(t *testing.T) {
	a := start(t)
	tok := a.token("shop", false)
	if code, b := adminOf(t, a).call("POST", "/token/shop/"+idOf(tok)+"/limit", fmt.Sprintf(`{"read":0,"write":3,"interval":%d}`, day)); code != 201 {
		t.Fatalf("POST the limit: %d %s", code, b)
	}
	roomInWindow(t, day, 2*time.Minute)
	for range 3 {
		if code, _ := a.do("PUT", "/api/shop/q", tok, "job"); code != 201 {
			t.Fatalf("a publish within the limit: %d", code)
		}
	}
	a.close()
	c := startOn(t, a.conn)
	ad := adminOf(t, c)
	if v, ok := ad.limit("shop", idOf(tok)); !ok || v.Write != 3 || v.Used["write"] != 3 {
		t.Fatalf("the limit after a restart: %+v, %v; want write 3, all used", v, ok)
	}
	if code, _ := c.do("PUT", "/api/shop/q", tok, "job"); code != 429 {
		t.Fatalf("a publish past the limit after a restart: %d; want 429", code)
	}
	if code, b := ad.call("DELETE", "/token/shop/"+idOf(tok)+"/limit", ""); code != 200 {
		t.Fatalf("DELETE: %d %s", code, b)
	}
	if code, _ := c.do("PUT", "/api/shop/q", tok, "job"); code != 201 {
		t.Fatalf("a publish once the limit is lifted: %d", code)
	}
}
