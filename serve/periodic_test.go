package serve_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/periodic"
	"github.com/onceq/onceq/serve"
)

// TestPeriodicAPIValidation: every bad parameter of a schedule's PUT is
// answered 400 (413 past the payload limit, 404 for a queue that does not
// exist) naming the field, and writes nothing.
func TestPeriodicAPIValidation(t *testing.T) {
	a := start(t, serve.Scheduler(false), serve.MaxPayloadBytes(1000))
	tok := a.token("shop", false)
	testutil.CreateTopic(t, a.conn, "shop.pings", 1)
	const ok = "queue=pings&every=60"
	for _, tc := range []struct {
		path, body string
		code       int
		field      string
		want       string
	}{
		{"a%20b?" + ok, "", 400, "name", `"a b": want 1 to 195 letters`},
		{strings.Repeat("n", 196) + "?" + ok, "", 400, "name", "at most 200 bytes"},
		{"x?every=60", "", 400, "queue", "missing: name the namespace's queue"},
		{"x?queue=a%20b&every=60", "", 400, "queue", "invalid queue name"},
		{"x?queue=a/b&every=60", "", 400, "queue", "a queue name has no '/'"},
		{"x?queue=nope&every=60", "", 404, "queue", "topic shop.nope) does not exist"},
		{"x?queue=pings", "", 400, "every", "every: give an interval such as 1m, or a cron spec"},
		{"x?queue=pings&every=soon", "", 400, "every", `"soon": want seconds or a Go duration`},
		{"x?queue=pings&every=1500ms", "", 400, "every", "every 1.5s: want a whole number of seconds from 1s to 366 days"},
		{"x?queue=pings&every=0", "", 400, "every", "every: give an interval"},
		{"x?queue=pings&every=400d", "", 400, "every", `"400d"`},
		{"x?queue=pings&every=9000h", "", 400, "every", "every 9000h0m0s: want a whole number of seconds"},
		{"x?queue=pings&every=60&cron=%40daily", "", 400, "cron", "give an interval or a cron spec, not both"},
		{"x?queue=pings&cron=0+9+*+*", "", 400, "cron", "want 5 fields"},
		{"x?queue=pings&cron=%40every+1m", "", 400, "cron", "give the interval as Every"},
		{"x?queue=pings&cron=%40daily&tz=Mars/Base", "", 400, "tz", "want an IANA time zone name"},
		{"x?queue=pings&cron=%40daily&tz=Local", "", 400, "tz", "name the zone"},
		{"x?" + ok + "&tz=Europe/Paris", "", 400, "tz", "a time zone applies to a cron spec only"},
		{"x?" + ok + "&missed=sometimes", "", 400, "missed", "want catch-up"},
		{"x?" + ok + "&max_attempts=-1", "", 400, "max_attempts", "max_attempts -1: want 0 (the worker's default) or 1 to"},
		{"x?" + ok + "&max_attempts=lots", "", 400, "max_attempts", `"lots": want 0`},
		{"x?" + ok + "&timeout=soon", "", 400, "timeout", `"soon": want seconds or a Go duration`},
		{"x?" + ok + "&timeout=1500us", "", 400, "timeout", "timeout 1.5ms: want 0"},
		{"x?" + ok + "&timeout=-5s", "", 400, "timeout", "timeout -5s: want 0"},
		{"x?" + ok + "&payload=a", "b", 400, "payload", "given as a parameter and as the body"},
		{"x?" + ok + "&payload=" + strings.Repeat("p", 1001), "", 413, "payload", "at most 1000"},
		{"x?" + ok, strings.Repeat("p", 1001), 413, "body", "at most 1000 bytes"},
		{"x?" + ok + "&priority=1", "", 400, "priority", "unknown parameter: this endpoint takes queue, every, cron"},
		{"x?" + ok + "&every=30", "", 400, "every", "given 2 times"},
		{"x?queue=a%20b&every=1500ms&max_attempts=-1", "", 400, "queue", "invalid queue name"},
		{"x?queue=pings&every=1500ms&max_attempts=-1", "", 400, "every", "every 1.5s: want a whole number of seconds from 1s to 366 days; calendar periods are cron specs such as @monthly\nmax_attempts -1"},
	} {
		code, body := a.do("PUT", "/periodic/shop/"+tc.path, tok, tc.body)
		if code != tc.code || body["field"] != tc.field || !strings.Contains(fmt.Sprint(body["error"]), tc.want) {
			t.Errorf("PUT %.80s: %d %v; want %d naming %q with %q", tc.path, code, body, tc.code, tc.field, tc.want)
		}
	}
	if code, body := a.do("PUT", "/periodic/sh.op/x?"+ok, tok, ""); code != 400 || body["field"] != "namespace" {
		t.Errorf("a bad namespace: %d %v", code, body)
	}
	// A form body holds parameters, checked as the query's.
	code, _, body := a.page("PUT", "/periodic/shop/x?token="+tok, "", url.Values{"queue": {"pings"}, "every": {"60"}, `{"kind":"sales"}`: {""}})
	if code != 400 || !strings.Contains(body, `"field":"{\"kind\":\"sales\"}"`) || !strings.Contains(body, "send the payload with another Content-Type") {
		t.Errorf("a form body with an unknown key: %d %s", code, body)
	}
	code, _, body = a.page("PUT", "/periodic/shop/x?token="+tok+"&every=60", "", url.Values{"queue": {"pings"}, "every": {"60"}})
	if code != 400 || !strings.Contains(body, `"field":"every"`) || !strings.Contains(body, "given 2 times") {
		t.Errorf("every in the query and the form: %d %s", code, body)
	}
	code, _, body = a.page("PUT", "/periodic/shop/x?token="+tok, "", url.Values{"queue": {"pings"}, "every": {"1500ms"}})
	if code != 400 || !strings.Contains(body, `"field":"every"`) {
		t.Errorf("a bad interval in a form: %d %s", code, body)
	}

	if code, body := a.do("GET", "/periodic/shop", tok, ""); code != 200 || fmt.Sprint(body["schedules"]) != "[]" {
		t.Fatalf("list after refused PUTs: %d %v; want none", code, body)
	}
	if recs := testutil.ReadCommitted(t, a.conn, 10*time.Second, periodic.Topic); len(recs) != 0 {
		t.Fatalf("refused PUTs wrote %d records to %s", len(recs), periodic.Topic)
	}
}

// TestPeriodicAPI: a namespace's token adds, reads, lists, replaces and
// removes its schedules, stored as <ns>.<name>; it neither sees nor
// touches another namespace's (403 on its paths) nor a schedule of its
// prefix whose queue is outside it; a read-only token reads only, an
// operator's token (*) uses any namespace, and no token is 401.
func TestPeriodicAPI(t *testing.T) {
	a := start(t, serve.Scheduler(false))
	for _, q := range []string{"shop.pings", "shop.reports", "other.pings", "billing.invoices"} {
		testutil.CreateTopic(t, a.conn, q, 1)
	}
	tok, ro, other := a.token("shop", false), a.token("shop", true), a.token("other", false)
	ops := a.token("*", false)

	code, body := a.do("PUT", "/periodic/shop/beat?queue=pings&every=30&max_attempts=3&timeout=90", tok, `{"kind":"ping"}`)
	if code != 201 || body["name"] != "beat" || body["queue"] != "pings" || body["every"] != "30s" || body["payload"] != `{"kind":"ping"}` ||
		body["max_attempts"] != 3.0 || body["timeout"] != "1m30s" || body["missed"] != "catch-up" || body["next"] == nil || body["since"] == nil {
		t.Fatalf("add: %d %v", code, body)
	}
	code, _, page := a.page("PUT", "/periodic/shop/morning?token="+tok, "", url.Values{"queue": {"reports"}, "cron": {"0 9 * * 1-5"},
		"tz": {"Europe/Paris"}, "missed": {"skip"}, "payload": {"sales"}})
	var morning map[string]any
	if err := json.Unmarshal([]byte(page), &morning); code != 201 || err != nil || morning["cron"] != "0 9 * * 1-5" || morning["tz"] != "Europe/Paris" ||
		morning["missed"] != "skip" || morning["payload"] != "sales" || morning["every"] != nil {
		t.Fatalf("add with a form: %d %s", code, page)
	}
	next, err := time.Parse(time.RFC3339, fmt.Sprint(morning["next"]))
	if paris, _ := time.LoadLocation("Europe/Paris"); err != nil || next.In(paris).Hour() != 9 || next.In(paris).Weekday() == time.Sunday {
		t.Fatalf("morning's next tick %v (%v): want 09:00 Paris on a weekday", morning["next"], err)
	}
	if code, body = a.do("PUT", "/periodic/other/beat?queue=pings&every=60", other, ""); code != 201 {
		t.Fatalf("another namespace's schedule of the same name: %d %v", code, body)
	}

	// Stored under the namespace's prefix, as onceq periodic list shows it.
	st, err := periodic.Open(context.Background(), a.conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if e, ok := st.Get("shop.beat", time.Now()); !ok || e.Queue != "shop.pings" || e.Every != 30*time.Second {
		t.Fatalf("the store's shop.beat: %v %+v", ok, e)
	}

	code, body = a.do("GET", "/periodic/shop", tok, "")
	if list, _ := body["schedules"].([]any); code != 200 || body["namespace"] != "shop" || len(list) != 2 ||
		list[0].(map[string]any)["name"] != "beat" || list[1].(map[string]any)["name"] != "morning" {
		t.Fatalf("list: %d %v", code, body)
	}
	if code, body = a.do("GET", "/periodic/shop/beat", ro, ""); code != 200 || body["queue"] != "pings" || body["every"] != "30s" {
		t.Fatalf("get with a read-only token: %d %v", code, body)
	}
	if code, body = a.do("GET", "/periodic/shop/nope", tok, ""); code != 404 || body["field"] != "name" {
		t.Fatalf("get of an unknown schedule: %d %v", code, body)
	}

	// Replace: 200, with the new values.
	code, body = a.do("PUT", "/periodic/shop/beat?queue=reports&every=1m&missed=skip", tok, "")
	if code != 200 || body["queue"] != "reports" || body["every"] != "1m0s" || body["missed"] != "skip" || body["payload"] != nil || body["max_attempts"] != nil {
		t.Fatalf("replace: %d %v", code, body)
	}

	// Tokens and namespaces.
	for _, r := range [][2]string{{"GET", "/periodic/shop"}, {"GET", "/periodic/shop/beat"},
		{"PUT", "/periodic/shop/beat?queue=pings&every=60"}, {"DELETE", "/periodic/shop/beat"}} {
		if code, body := a.do(r[0], r[1], "", ""); code != 401 {
			t.Errorf("%s %s without a token: %d %v", r[0], r[1], code, body)
		}
		if code, body := a.do(r[0], r[1], other, ""); code != 403 || !strings.Contains(fmt.Sprint(body["error"]), "opens namespace other, not shop") {
			t.Errorf("%s %s with another namespace's token: %d %v", r[0], r[1], code, body)
		}
		if code, body := a.do(r[0], r[1], ro, ""); r[0] != "GET" && code != 403 || r[0] == "GET" && code != 200 {
			t.Errorf("%s %s with a read-only token: %d %v", r[0], r[1], code, body)
		}
	}
	code, body = a.do("GET", "/periodic/other", other, "")
	if list, _ := body["schedules"].([]any); code != 200 || len(list) != 1 || list[0].(map[string]any)["queue"] != "pings" {
		t.Fatalf("the other namespace's list: %d %v", code, body)
	}
	if code, body = a.do("GET", "/periodic/shop/beat", ops, ""); code != 200 || body["queue"] != "reports" {
		t.Fatalf("an operator's token on namespace shop: %d %v", code, body)
	}
	if code, body = a.do("GET", "/periodic/%2A", ops, ""); code != 400 || body["field"] != "namespace" {
		t.Fatalf("namespace * in a path: %d %v", code, body)
	}

	// A schedule of shop's prefix whose queue is billing's, as onceq
	// periodic add may make: namespace shop does not see it nor replace it.
	if _, err := st.Add(context.Background(), periodic.Schedule{Name: "shop.legacy", Queue: "billing.invoices", Every: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if code, body = a.do("GET", "/periodic/shop/legacy", ops, ""); code != 404 {
		t.Fatalf("get of a schedule whose queue is outside the namespace: %d %v", code, body)
	}
	if code, body = a.do("PUT", "/periodic/shop/legacy?queue=pings&every=60", tok, ""); code != 409 || body["field"] != "name" {
		t.Fatalf("put over a schedule whose queue is outside the namespace: %d %v", code, body)
	}
	if code, body = a.do("DELETE", "/periodic/shop/legacy", tok, ""); code != 404 {
		t.Fatalf("delete of a schedule whose queue is outside the namespace: %d %v", code, body)
	}
	if e, ok := st.Get("shop.legacy", time.Now()); !ok || e.Queue != "billing.invoices" {
		t.Fatalf("shop.legacy after the refused requests: %v %+v", ok, e)
	}

	// Remove.
	if code, body = a.do("DELETE", "/periodic/shop/beat", tok, ""); code != 204 || body != nil {
		t.Fatalf("delete: %d %v", code, body)
	}
	if code, _ = a.do("DELETE", "/periodic/shop/beat", tok, ""); code != 404 {
		t.Fatalf("delete again: %d", code)
	}
	if code, _ = a.do("GET", "/periodic/shop/beat", tok, ""); code != 404 {
		t.Fatalf("get after delete: %d", code)
	}
	// st follows the topic on its own: it applies the removal a moment
	// after the server that wrote it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := st.Get("shop.beat", time.Now()); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("shop.beat is still in the store 30 s after its removal")
		}
	}
	if _, ok := st.Get("other.beat", time.Now()); !ok {
		t.Fatal("other.beat is gone with shop.beat")
	}
}

// TestPeriodicAPITicks: a schedule added over HTTP is run by the server's
// scheduler: an HTTP consumer of its queue gets its ticks' tasks, with
// the IDs <ns>.<name>@<tick> and its payload, and the schedule's last
// tick moves.
func TestPeriodicAPITicks(t *testing.T) {
	a := start(t, serve.DataDir(t.TempDir()))
	testutil.CreateTopic(t, a.conn, "shop.pings", 1)
	tok := a.token("shop", false)
	if code, body := a.do("PUT", "/periodic/shop/beat?queue=pings&every=1s", tok, "ping"); code != 201 {
		t.Fatalf("add: %d %v", code, body)
	}
	deadline := time.Now().Add(time.Minute)
	seen := map[string]bool{}
	for len(seen) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("ticks consumed: %v; want 2", seen)
		}
		code, body := a.do("GET", "/api/shop/pings?ttr=30&timeout=5", tok, "")
		if code == 404 {
			continue
		}
		id := fmt.Sprint(body["job_id"])
		name, tick, ok := periodic.ParseTaskID(id)
		if code != 200 || !ok || name != "shop.beat" || !tick.Equal(tick.Truncate(time.Second)) || body["data"] != base64.StdEncoding.EncodeToString([]byte("ping")) {
			t.Fatalf("consume: %d %v; want a tick of shop.beat with its payload", code, body)
		}
		if time.Until(tick) > 0 {
			t.Fatalf("tick %s consumed at %s, before it", tick, time.Now())
		}
		seen[id] = true
		if code, out := a.del("/api/shop/pings/job/"+url.PathEscape(id), tok, ""); code != 204 || out != "acknowledged" {
			t.Fatalf("ack %s: %d %s; want 204 acknowledged", id, code, out)
		}
	}
	code, body := a.do("GET", "/periodic/shop/beat", tok, "")
	if code != 200 || body["last"] == nil {
		t.Fatalf("get after ticks: %d %v; want a last tick", code, body)
	}
}
