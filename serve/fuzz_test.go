package serve

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
)

// Fuzz tests of the decoders of outside bytes: lmstfy's bulk publish
// body, a publish's query and Job-Attr-* headers, and the mapping of a
// namespace's queue to its topic. Each checks that bad input is an
// answer of 4xx, never a panic or a 500, and what the decoder promises
// of what it accepts.

// answered fails t unless err is nil or a 4xx answer.
func answered(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) || ae.status < 400 || ae.status > 499 {
		t.Fatalf("%v: want a 4xx answer", err)
	}
}

func FuzzLmstfyBulk(f *testing.F) {
	for _, seed := range []string{`[{"order":1},"text",3]`, `[]`, `[null]`, `{"a":1}`, `["x",`, `[1e999]`,
		`[` + strings.Repeat(`0,`, MaxBulkJobs) + `0]`, `["` + strings.Repeat("p", 70) + `"]`, "[\"\xff\"]", ` [ true ] `} {
		f.Add([]byte(seed))
	}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	spec := onceq.Spec{Queue: "shop.q", MaxAttempts: DefaultTries, TTL: DefaultJobTTL.String()}
	f.Fuzz(func(t *testing.T, body []byte) {
		tasks, err := lmstfyBulk(body, spec, payloadLimit{max: 64}, now)
		answered(t, err)
		if err != nil {
			return
		}
		if len(tasks) < 1 || len(tasks) > MaxBulkJobs {
			t.Fatalf("%d tasks accepted", len(tasks))
		}
		var raws []json.RawMessage
		if json.Unmarshal(body, &raws) != nil || len(raws) != len(tasks) {
			t.Fatalf("accepted %q, not a JSON array of %d", body, len(tasks))
		}
		for i, task := range tasks {
			if len(task.Payload) > 64 || !json.Valid(task.Payload) || task.Queue != "shop.q" || task.MaxAttempts != DefaultTries {
				t.Fatalf("task %d of %q: %+v", i, body, task)
			}
			if err := task.Validate(0); err != nil {
				t.Fatalf("task %d accepted, then invalid: %v", i, err)
			}
		}
	})
}

func FuzzLmstfyPublish(f *testing.F) {
	f.Add("delay=10&ttl=3600&tries=3", "YES", "Job-Attr-Color", "red", "Job-Attr-Size", "xl")
	f.Add("ttl=0&tries=1&delay=0", "yes", "Job-Attr-"+strings.Repeat("K", 40), strings.Repeat("v", 200), "X-Other", "1")
	f.Add("delay=90&ttl=10", "", "Job-Attr-A", "b", "", "")
	f.Add("id=order-1&timeout=1m30s&tries=70000", "YES", "Job-Attr-", "x", "job-attr-a", "\x00\xff")
	f.Add("delay=-1&ttl=1e9&tries=x&id=%20", "NO", "Job-Attr-A", "", "Job-Attr-b", "c")
	f.Add("", "YES", "Job-Attr-\xff\xfe"+strings.Repeat("K", 40), "v", "", "") // bytes that are not UTF-8 stay bytes: the key stays within 32
	f.Add("priority=9&tries=2", "", "", "", "", "")
	f.Add("priority=10", "", "", "", "", "")
	f.Add("priority=-1&delay=5", "", "", "", "", "")
	f.Add("priority=+07", "", "", "", "", "")
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, query, version, k1, v1, k2, v2 string) {
		r, err := http.NewRequest("PUT", "http://x/api/shop/q?"+query, nil)
		if err != nil {
			return // not a URL net/http would serve
		}
		r.Header.Set("Enable-Job-Version", version)
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
			r.Header[http.CanonicalHeaderKey(kv[0])] = append(r.Header[http.CanonicalHeaderKey(kv[0])], kv[1])
		}
		spec, _, err := lmstfySpec(r)
		answered(t, err)
		if err != nil {
			return
		}
		attrs := attributesOf(spec.Headers)
		if len(attrs) > maxAttributes || len(attrs) != len(spec.Headers) {
			t.Fatalf("attributes %v of headers %v", attrs, spec.Headers)
		}
		for k, v := range attrs {
			if len(k) > maxAttributeKeyLen || len(v) > maxAttributeValLen || k != lowerASCII(k) || strings.ContainsAny(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
				t.Fatalf("attribute %q=%q kept", k, v)
			}
		}
		spec.Queue = "shop.q"
		task, err := spec.Task(now, nil)
		answered(t, taskError(err))
		if err == nil && task.MaxAttempts < 1 {
			t.Fatalf("a task of %d attempts from %q", task.MaxAttempts, query)
		}
		if err == nil && (task.Priority < 0 || task.Priority > onceq.MaxPriority) {
			t.Fatalf("a task of priority %d from %q", task.Priority, query)
		}
	})
}

// kafkaName is a topic name as Kafka compares them: '.' and '_' alike.
func kafkaName(topic string) string { return strings.ReplaceAll(topic, ".", "_") }

func FuzzTopicOf(f *testing.F) {
	f.Add("shop", "x_y", "shop_x", "y")
	f.Add("shop", "x-y", "shop-x", "y")
	f.Add("a_", "b", "a", "_b")
	f.Add("shop", "x.y", "shop", "x_y")
	f.Add("s", strings.Repeat("q", 300), "s", "q")
	s := &Server{cfg: config{pullGroup: DefaultPullGroup}}
	f.Fuzz(func(t *testing.T, ns1, q1, ns2, q2 string) {
		t1, err1 := s.queueOf(ns1, q1)
		t2, err2 := s.queueOf(ns2, q2)
		answered(t, err1)
		answered(t, err2)
		for _, tp := range []string{t1, t2} {
			if tp != "" && len(tp) > s.maxTopicLen() {
				t.Fatalf("topic %q is over %d bytes", tp, s.maxTopicLen())
			}
		}
		// Namespaces as the API takes them: letters, digits, '_', '-'.
		valid := func(ns string) bool {
			for i := 0; i < len(ns); i++ {
				if c := ns[i]; !queueNameByte(c) && c != '_' {
					return false
				}
			}
			return ns != ""
		}
		if err1 == nil && err2 == nil && valid(ns1) && valid(ns2) && kafkaName(t1) == kafkaName(t2) && (ns1 != ns2 || q1 != q2) {
			t.Fatalf("%s's queue %s and %s's queue %s share topic %s under Kafka's rule", ns1, q1, ns2, q2, kafkaName(t1))
		}
	})
}
