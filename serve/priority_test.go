package serve_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestPublishPriority: a publish's priority= (one job, with an ID or
// without, and lmstfy's bulk) and a POST bulk task's "priority" become
// the task's onceq-priority header; a consume answers each job's
// priority, left out when 0; once acknowledged, the task's record, as
// the API and the console's task page show it, has it too. A priority
// out of range, or not a number, is answered 400 naming priority and its
// range, and writes nothing.
func TestPublishPriority(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/api/shop/jobs?id=p-7&priority=7", "x"},
		{"PUT", "/api/shop/jobs?id=p-0", "x"},
		{"PUT", "/api/shop/jobs?priority=3", "no id"},
		{"PUT", "/api/shop/jobs/bulk?priority=5", `["bulk"]`},
		{"POST", "/api/shop/jobs/bulk", `[{"id":"line-9","payload":"x","priority":9}]`},
	} {
		if code, body := a.do(tc.method, tc.path, tok, tc.body); code != 201 {
			t.Fatalf("%s %s: %d %v", tc.method, tc.path, code, body)
		}
	}
	for _, tc := range []struct{ method, path, body, field, want string }{
		{"PUT", "/api/shop/jobs?priority=10", "x", "priority", `priority: "10": want a whole number from 0 (the default, the lowest) to 9 (the highest)`},
		{"PUT", "/api/shop/jobs?priority=-1", "x", "priority", `"-1": want a whole number from 0 (the default, the lowest) to 9`},
		{"PUT", "/api/shop/jobs?priority=high", "x", "priority", `"high": want a whole number from 0`},
		{"PUT", "/api/shop/jobs?id=p-bad&priority=1.5", "x", "priority", `"1.5": want a whole number`},
		{"PUT", "/api/shop/jobs/bulk?priority=10", `["x"]`, "priority", `"10": want a whole number from 0`},
		{"PUT", "/api/shop/jobs/job/p-7?priority=10", "y", "priority", `"10": want a whole number from 0`},
		{"POST", "/api/shop/jobs/bulk", `[{"id":"ok-1"},{"priority":10}]`, "[1].priority", `want 0 (the default, the lowest) to 9 (the highest)`},
	} {
		code, body := a.do(tc.method, tc.path, tok, tc.body)
		if code != 400 || body["field"] != tc.field || !strings.Contains(fmt.Sprint(body["error"]), tc.want) {
			t.Errorf("%s %s: %d %v; want 400 naming %q and %q", tc.method, tc.path, code, body, tc.field, tc.want)
		}
	}
	// On the wire: the headers of the five tasks, by ID or, for those
	// of a generated ID, by payload; nothing of the refused requests.
	want := map[string]string{"p-7": "7", "p-0": "none", "no id": "3", `"bulk"`: "5", "line-9": "9"}
	name := map[string]string{} // a task's ID: its key in want
	headers := map[string]string{}
	for _, r := range testutil.ReadCommitted(t, a.conn, 20*time.Second, "shop.jobs") {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		name[task.ID] = task.ID
		if task.GeneratedID {
			name[task.ID] = string(task.Payload)
		}
		headers[name[task.ID]] = "none"
		for _, h := range r.Headers {
			if h.Key == onceq.HeaderPriority {
				headers[name[task.ID]] = string(h.Value)
			}
		}
	}
	if !maps.Equal(headers, want) {
		t.Fatalf("shop.jobs holds tasks with onceq-priority %v; want %v", headers, want)
	}

	// A consume answers each job's priority, none for p-0.
	got := map[string]string{}
	deadline := time.Now().Add(time.Minute)
	for len(got) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %v after a minute; want the 5 jobs", got)
		}
		code, jobs := consume(t, a, tok, "/api/shop/jobs?ttr=60&timeout=5&count=10")
		if code != 200 && code != 404 {
			t.Fatalf("consume: %d", code)
		}
		for _, j := range jobs {
			if code, body := a.do("DELETE", "/api/shop/jobs/job/"+j.JobID, tok, ""); code != 204 {
				t.Fatalf("ack of %s: %d %v", j.JobID, code, body)
			}
			got[name[j.JobID]] = "none"
			if j.Priority != nil {
				got[name[j.JobID]] = fmt.Sprint(*j.Priority)
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("consumed jobs with priorities %v; want %v", got, want)
	}

	// The records of the tasks the pull worker ran: p-7's has its
	// priority, p-0's none.
	for id, want := range map[string]any{"p-7": 7.0, "p-0": nil} {
		code, body := a.do("GET", "/api/shop/jobs/job/"+id+"/wait?timeout=60", tok, "")
		task, _ := body["task"].(map[string]any)
		if code != 200 || task["state"] != "succeeded" || task["priority"] != want {
			t.Fatalf("record of %s: %d %v; want succeeded with priority %v", id, code, body, want)
		}
	}
	if code, _, page := a.page("GET", "/console/q/shop.jobs/task/p-7", tok, nil); code != 200 || !strings.Contains(page, `<dt>Priority</dt><dd id="priority">7</dd>`) {
		t.Fatalf("console's task page of p-7: %d, want its priority 7 in\n%s", code, page)
	}
}
