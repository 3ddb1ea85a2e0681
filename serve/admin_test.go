package serve_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/serve"
)

// TestAdmin: the admin API creates, lists and revokes tokens for an
// operator's token only; a token it creates opens its namespace's API.
func TestAdmin(t *testing.T) {
	a := start(t)
	op, shop, roOp := a.token("*", false), a.token("shop", false), a.token("*", true)
	admin := httptest.NewServer(a.srv.AdminHandler())
	defer admin.Close()
	api := &api{t: t, url: admin.URL, conn: a.conn, srv: a.srv}
	for _, tok := range []string{"", shop, roOp} {
		want := map[bool]int{true: 401, false: 403}[tok == ""]
		if code, body := api.do("POST", "/token/sales", tok, ""); code != want {
			t.Errorf("create with token %q: %d %v; want %d", tok, code, body, want)
		}
	}
	code, body := api.do("POST", "/token/sales?description=reports&read_only=true", op, "")
	newTok, _ := body["token"].(string)
	if code != 201 || !strings.HasPrefix(newTok, "oq_") || body["read_only"] != true {
		t.Fatalf("create: %d %v", code, body)
	}
	if code, body := a.do("GET", "/api/sales", newTok, ""); code != 200 {
		t.Fatalf("the created token on its namespace's API: %d %v", code, body)
	}
	code, body = api.do("GET", "/token/sales", op, "")
	if toks, _ := body["tokens"].([]any); code != 200 || len(toks) != 1 || strings.Contains(fmt.Sprint(body), newTok[20:]) {
		t.Fatalf("list: %d %v", code, body)
	}
	for _, bad := range []struct{ method, path, field string }{
		{"POST", "/token/sa.les", "namespace"}, {"POST", "/token/sales?read_only=maybe", "read_only"},
		{"POST", "/token/sales?owner=me", "owner"}, {"DELETE", "/token/sales/xyz", "id"},
	} {
		if code, body := api.do(bad.method, bad.path, op, ""); code != 400 || body["field"] != bad.field {
			t.Errorf("%s %s: %d %v; want 400 naming %s", bad.method, bad.path, code, body, bad.field)
		}
	}
	id := newTok[3:19]
	if code, body := api.do("DELETE", "/token/shop/"+id, op, ""); code != 404 {
		t.Fatalf("revoke through another namespace: %d %v", code, body)
	}
	if code, body := api.do("DELETE", "/token/sales/"+id, op, ""); code != 204 {
		t.Fatalf("revoke: %d %v", code, body)
	}
	if code, _ := a.do("GET", "/api/sales", newTok, ""); code != 401 {
		t.Fatalf("a revoked token: %d; want 401", code)
	}
}

// TestAdminLmstfy: lmstfy's admin API: basic auth with an operator's token
// as the password, a token created from a form body, revoked by the token
// itself (with lmstfy's pool prefix), and /info, /version and /pools in
// lmstfy's shapes.
func TestAdminLmstfy(t *testing.T) {
	a := start(t)
	op := a.token("*", false)
	admin := httptest.NewServer(a.srv.AdminHandler())
	defer admin.Close()
	send := func(method, path, user, pw string, form url.Values) (int, []byte) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, admin.URL+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if pw != "" {
			req.SetBasicAuth(user, pw)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := send("GET", "/pools", "admin", "wrong", nil); code != 401 {
		t.Fatalf("basic auth with a wrong password: %d; want 401", code)
	}
	if code, _ := send("GET", "/pools", "", "", nil); code != 401 {
		t.Fatalf("no credentials: %d; want 401", code)
	}
	code, b := send("POST", "/token/shop", "admin", op, url.Values{"description": {"lmstfy"}})
	var created struct{ Token string }
	if code != 201 || json.Unmarshal(b, &created) != nil || created.Token == "" {
		t.Fatalf("create from a form: %d %s", code, b)
	}
	if code, body := a.do("PUT", "/api/shop/q", created.Token, "x"); code != 201 {
		t.Fatalf("publish with the token: %d %v", code, body)
	}
	if code, b = send("POST", "/token/shop?pool=other", "admin", op, nil); code != 400 {
		t.Fatalf("another pool: %d %s", code, b)
	}
	code, b = send("GET", "/info", "admin", op, nil)
	var info map[string][]string
	if code != 200 || json.Unmarshal(b, &info) != nil || fmt.Sprint(info["shop"]) != "[q]" {
		t.Fatalf("/info: %d %s", code, b)
	}
	code, b = send("GET", "/version", "admin", op, nil)
	var version map[string]string
	if code != 200 || json.Unmarshal(b, &version) != nil || version["version"] == "" || version["build_commit"] == "" || version["build_date"] == "" {
		t.Fatalf("/version: %d %s", code, b)
	}
	if code, b = send("GET", "/pools", "admin", op, nil); code != 200 || strings.TrimSpace(string(b)) != `["default"]` {
		t.Fatalf("/pools: %d %s", code, b)
	}
	if code, b = send("DELETE", "/token/shop/default:"+created.Token, "admin", op, nil); code != 204 {
		t.Fatalf("revoke by the token: %d %s", code, b)
	}
	if code, _ := a.do("PUT", "/api/shop/q", created.Token, "x"); code != 401 {
		t.Fatalf("a revoked token: %d; want 401", code)
	}
}

// TestAdminMetricsAndProfiles: the admin API serves /metrics, onceq's
// series and lmstfy's under its names (its dashboards'), and Go's
// profiles under /debug/pprof/, both to an operator's token alone.
func TestAdminMetricsAndProfiles(t *testing.T) {
	a := start(t, serve.Lane(serve.DefaultLane), serve.CreateQueues(1))
	op := a.token("*", false)
	c := &lmstfyClient{t: t, a: a, ns: "shop", token: a.token("shop", false)}
	admin := httptest.NewServer(a.srv.AdminHandler()) // lmstfy's series count from here
	defer admin.Close()
	id := c.publish("emails", "", []byte("x"), nil, 0, 1, 0)
	if got := c.consume([]string{"emails"}, 1, 30, 10, false); len(got) != 1 || got[0].ID != id {
		t.Fatalf("consume: %+v; want %s", got, id)
	}
	c.ack("emails", id)
	get := func(path, token string) (int, string) {
		t.Helper()
		code, _, b := call(t, "GET", admin.URL+path, token, "")
		return code, string(b)
	}
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap"} {
		if code, _ := get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d; want 401", path, code)
		}
		if code, _ := get(path, c.token); code != http.StatusForbidden {
			t.Errorf("GET %s with a namespace's token: %d; want 403", path, code)
		}
	}
	code, body := get("/metrics", op)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`infra_lmstfy_http_http_codes{api="/api/:namespace/:queue",code="201",method="PUT",namespace="shop",pool="default"} 1`,
		`infra_lmstfy_http_http_codes{api="/api/:namespace/:queue/job/:job_id",code="204",method="DELETE",namespace="shop",pool="default"} 1`,
		`infra_lmstfy_http_latency_milliseconds_count{api="/api/:namespace/:queue",method="GET",namespace="shop",pool="default"} 1`,
		`infra_lmstfy_redis_publish_queue_jobs{namespace="shop",pool="default",queue="emails"} 1`,
		`infra_lmstfy_redis_consume_queue_jobs{namespace="shop",pool="default",queue="emails"} 1`,
		`infra_lmstfy_redis_job_elapsed_ms_count{namespace="shop",pool="default",queue="emails"} 1`,
		`onceq_http_requests_total{code="201",route="publish"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// onceq's own /metrics carries none of lmstfy's per-queue series.
	if b := scrape(t, a.url+"/metrics", op); !strings.Contains(b, "onceq_http_requests_total") || strings.Contains(b, "infra_lmstfy") {
		t.Errorf("the API's /metrics: onceq's series %v, lmstfy's %v; want onceq's alone", strings.Contains(b, "onceq_http_requests_total"), strings.Contains(b, "infra_lmstfy"))
	}
	if code, body := get("/debug/pprof/heap?debug=1", op); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Errorf("/debug/pprof/heap: %d %.80s", code, body)
	}
}

// TestAdminAccounts: with admin accounts (lmstfy's), the admin API takes
// an account's name and password by basic auth, refuses a wrong one, and
// still takes an operator's token as the password of any other name.
func TestAdminAccounts(t *testing.T) {
	line, err := auth.HashPassword("ops", []byte("correct horse battery"))
	if err != nil {
		t.Fatal(err)
	}
	accounts, err := auth.ParseAccounts(strings.NewReader(line), "accounts")
	if err != nil {
		t.Fatal(err)
	}
	a := start(t, serve.AdminAccounts(accounts))
	op := a.token("*", false)
	admin := httptest.NewServer(a.srv.AdminHandler())
	defer admin.Close()
	for _, tc := range []struct {
		user, pw string
		want     int
	}{
		{"ops", "correct horse battery", http.StatusOK},
		{"ops", "wrong horse battery", http.StatusUnauthorized},
		{"ops", op, http.StatusUnauthorized}, // an account's password is its own
		{"admin", op, http.StatusOK},
		{"admin", "correct horse battery", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest("GET", admin.URL+"/pools", nil)
		req.SetBasicAuth(tc.user, tc.pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /pools as %s: %d; want %d", tc.user, resp.StatusCode, tc.want)
		}
	}
}

// scrape GETs a Prometheus page with token.
func scrape(t *testing.T, url, token string) string {
	t.Helper()
	_, _, b := call(t, "GET", url, token, "")
	return string(b)
}
