package serve_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestPublishQueueNotCreated: a publish to a queue the brokers refuse to
// create (a policy, here) is answered 503 naming the queue and the
// brokers' reason, not a bare 500; with an ID or without, and for a
// workflow's queue in a bulk publish. Nothing is written.
func TestPublishQueueNotCreated(t *testing.T) {
	testutil.NeedsEmbedded(t, "refuses CreateTopics through the cluster's control hooks")
	emb, conn := testutil.StartBroker(t, "")
	a := startOn(t, conn)
	tok := a.token("shop", false)
	const reason = "topic creation is disabled for shop.*"
	c := emb.Cluster()
	c.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.CreateTopicsRequest)
		if !slices.ContainsFunc(req.Topics, func(rt kmsg.CreateTopicsRequestTopic) bool { return strings.HasPrefix(rt.Topic, "shop.") }) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic, st.ErrorCode, st.ErrorMessage = rt.Topic, kerr.PolicyViolation.Code, new(reason)
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	for _, tc := range []struct{ method, path, body, queue string }{
		{"PUT", "/api/shop/fresh?id=f-1", "x", "shop.fresh"},
		{"PUT", "/api/shop/fresh", "x", "shop.fresh"},
		{"POST", "/api/shop/fresh/bulk", `[{"id":"flow-1","chain":[{"payload":"a","queue":"later"},{"payload":"b","queue":"later"}]}]`, "shop.later"},
	} {
		code, body := a.do(tc.method, tc.path, tok, tc.body)
		msg := fmt.Sprint(body["error"])
		if code != http.StatusServiceUnavailable || body["field"] != "queue" || !strings.Contains(msg, tc.queue) ||
			!strings.Contains(msg, reason) || !strings.Contains(msg, "onceq topics create") {
			t.Errorf("%s %s: %d %v; want 503 naming %s, the brokers' reason and how to create it", tc.method, tc.path, code, body, tc.queue)
		} else {
			t.Logf("%s %s: %d %s", tc.method, tc.path, code, msg)
		}
	}
	if code, body := a.do("GET", "/api/shop/fresh/task/f-1", tok, ""); code != http.StatusNotFound {
		t.Fatalf("the refused job: %d %v; want 404 (nothing written)", code, body)
	}
}

// TestPublishRefusesIDsNotInAPath: a job or workflow ID that cannot be
// named again in a URL path segment ("." and "..", dot segments, and "/",
// a trailing slash to net/http's router) is refused at publish with 400
// naming the id, in a publish and in a bulk's task or workflow; nothing
// is written. IDs beside them ("...", "a/..", "./") are taken and found
// again under their escaped paths.
func TestPublishRefusesIDsNotInAPath(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	for _, id := range []string{".", "..", "/"} {
		for _, tc := range []struct{ method, path, body, field string }{
			{"PUT", "/api/shop/dots?id=" + url.QueryEscape(id), "x", "id"},
			{"POST", "/api/shop/dots/bulk", fmt.Sprintf(`[{"id":"ok-1","payload":"x"},{"id":%q,"payload":"x"}]`, id), "[1].id"},
			{"POST", "/api/shop/dots/bulk", fmt.Sprintf(`[{"id":%q,"chain":[{"payload":"a"},{"payload":"b"}]}]`, id), "[0].id"},
		} {
			code, body := a.do(tc.method, tc.path, tok, tc.body)
			if code != http.StatusBadRequest || body["field"] != tc.field || !strings.Contains(fmt.Sprint(body["error"]), "cannot be named in a URL path") {
				t.Errorf("%s %s %s: %d %v; want 400, field %s", tc.method, tc.path, tc.body, code, body, tc.field)
			}
		}
	}
	if code, body := a.do("GET", "/api/shop/dots/task/ok-1", tok, ""); code != http.StatusNotFound {
		t.Errorf("the refused bulk's other task: %d %v; want 404 (nothing written)", code, body)
	}
	for _, id := range []string{"...", "a/..", "./"} {
		if code, body := a.do("PUT", "/api/shop/dots?id="+url.QueryEscape(id), tok, "x"); code != http.StatusCreated {
			t.Fatalf("publish of %q: %d %v", id, code, body)
		}
		if code, body := a.do("GET", "/api/shop/dots/task/"+url.PathEscape(id), tok, ""); code != http.StatusOK || body["job_id"] != id {
			t.Errorf("job %q at its escaped path: %d %v", id, code, body)
		}
	}
}

// TestPublishedJobsVisibleBeforeConsume: jobs published over HTTP without
// an ID, an immediate one and a delayed one, are known before anyone
// consumes them: their task shows pending and scheduled, the queue's
// stats count both, and the delayed one is canceled (not refused as
// unknown). A consume then hands out the first and never the second,
// which ends canceled.
func TestPublishedJobsVisibleBeforeConsume(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	publish := func(query string) string {
		t.Helper()
		code, body := a.do("PUT", "/api/shop/jobs"+query, tok, "x")
		id, _ := body["job_id"].(string)
		if code != 201 || id == "" {
			t.Fatalf("publish%s: %d %v", query, code, body)
		}
		return id
	}
	now, later := publish(""), publish("?delay=2")
	for id, want := range map[string]string{now: "pending", later: "scheduled"} {
		code, body := a.do("GET", "/api/shop/jobs/task/"+id, tok, "")
		if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != want {
			t.Fatalf("task %s before any consume: %d %v; want %s", id, code, body, want)
		}
	}
	code, st := a.do("GET", "/api/shop/jobs/stats", tok, "")
	if tasks, _ := st["tasks"].(map[string]any); code != 200 || tasks["pending"] != 1.0 || tasks["scheduled"] != 1.0 {
		t.Fatalf("stats before any consume: %d %v; want 1 pending and 1 scheduled", code, st)
	}
	// Due about when the cancel's wait ends: it may say either.
	if code, body := a.do("POST", "/api/shop/jobs/job/"+later+"/cancel", tok, ""); (code != 202 || body["cancel"] != "pending") && (code != 200 || body["cancel"] != "canceled") {
		t.Fatalf("cancel of the delayed job: %d %v; want 202 pending or 200 canceled", code, body)
	}
	// A job deleted before it was handed out ends canceled at once, as
	// the delayed one does: no reader sees either waiting or overdue.
	gone := publish("")
	if code, out := a.del("/api/shop/jobs/job/"+gone, tok, ""); code != 204 || out != "canceled" {
		t.Fatalf("DELETE of a job not handed out: %d %s; want 204 canceled", code, out)
	}
	for _, id := range []string{later, gone} {
		code, body := a.do("GET", "/api/shop/jobs/job/"+id+"/wait?timeout=5", tok, "")
		if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "canceled" {
			t.Fatalf("job %s once canceled: %d %v; want canceled at once", id, code, body)
		}
	}
	code, st = a.do("GET", "/api/shop/jobs/stats", tok, "")
	if tasks, _ := st["tasks"].(map[string]any); code != 200 || tasks["pending"] != 1.0 || tasks["canceled"] != 2.0 || tasks["scheduled"] != nil || st["overdue"] != 0.0 {
		t.Fatalf("stats once two are canceled: %d %v; want 1 pending, 2 canceled, none scheduled or overdue", code, st)
	}
	code, body := a.do("GET", "/api/shop/jobs?timeout=5", tok, "")
	if code != 200 || body["job_id"] != now {
		t.Fatalf("consume: %d %v; want %s", code, body, now)
	}
	if code, body = a.do("GET", "/api/shop/jobs?timeout=4", tok, ""); code != 404 {
		t.Fatalf("consume past the delayed job's due time: %d %v; want no job", code, body)
	}
	code, body = a.do("GET", "/api/shop/jobs/job/"+later+"/wait?timeout=30", tok, "")
	if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "canceled" {
		t.Fatalf("the canceled job: %d %v; want canceled", code, body)
	}
}

// TestPublishWithoutRecords: with Records(false), a job published without
// an ID has no record until it is handed out (its task answers with the
// job alone), as before records were written from the publish; one with
// an ID still has one.
func TestPublishWithoutRecords(t *testing.T) {
	a := start(t, serve.CreateQueues(1), serve.Records(false))
	tok := a.token("shop", false)
	code, body := a.do("PUT", "/api/shop/jobs", tok, "x")
	id, _ := body["job_id"].(string)
	if code != 201 || id == "" {
		t.Fatalf("publish: %d %v", code, body)
	}
	if code, body := a.do("PUT", "/api/shop/jobs?id=mine", tok, "x"); code != 201 {
		t.Fatalf("publish with an ID: %d %v", code, body)
	}
	if code, body := a.do("GET", "/api/shop/jobs/task/mine", tok, ""); code != 200 || body["task"] == nil {
		t.Fatalf("task of the job published with an ID: %d %v; want its record", code, body)
	}
	if code, body := a.do("GET", "/api/shop/jobs/task/"+id, tok, ""); code != 200 || body["task"] != nil {
		t.Fatalf("task of the job published without an ID: %d %v; want the job without a record", code, body)
	}
}
