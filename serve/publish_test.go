package serve_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/testutil"
)

// TestPublishQueueNotCreated: a publish to a queue the brokers refuse to
// create (a policy, here) is answered 503 naming the queue and the
// brokers' reason, not a bare 500; with an ID or without, and for a
// workflow's queue in a bulk publish. Nothing is written.
func TestPublishQueueNotCreated(t *testing.T) {
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
	if code, body := a.do("GET", "/api/shop/fresh/job/f-1", tok, ""); code != http.StatusNotFound {
		t.Fatalf("the refused job: %d %v; want 404 (nothing written)", code, body)
	}
}
