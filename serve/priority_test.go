package serve_test

import (
	"fmt"
	"maps"
	"slices"
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
			if code, out := a.del("/api/shop/jobs/job/"+j.JobID, tok, ""); code != 204 || out != "acknowledged" {
				t.Fatalf("ack of %s: %d %s; want 204 acknowledged", j.JobID, code, out)
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

// TestHandOutOrder: the jobs a server holds for its consumers are handed
// out highest priority first, and within one priority in the order they
// came: a job of priority 9 published behind 29 jobs of priority 0 that
// wait for a consumer is handed out next, then the others in their order.
func TestHandOutOrder(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	var lines, want []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf(`{"id":"o-%02d","payload":"x"}`, i))
		want = append(want, fmt.Sprintf("o-%02d", i))
	}
	if code, body := a.do("POST", "/api/shop/order/bulk", tok, "["+strings.Join(lines, ",")+"]"); code != 201 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	// A consumer that waits takes whichever job is offered first.
	first := consumeOne(t, a, tok, "/api/shop/order?ttr=60&timeout=30").JobID
	want = slices.DeleteFunc(want, func(id string) bool { return id == first })
	waitOffered(t, a, "shop.order", 29)
	if code, body := a.do("PUT", "/api/shop/order?id=urgent&priority=9", tok, "x"); code != 201 {
		t.Fatalf("publish: %d %v", code, body)
	}
	waitOffered(t, a, "shop.order", 30)
	var got []string
	for range 30 {
		got = append(got, consumeOne(t, a, tok, "/api/shop/order?ttr=60&timeout=30").JobID)
	}
	want = append([]string{"urgent"}, want...)
	if !slices.Equal(got, want) {
		t.Fatalf("handed out %v; want %v", got, want)
	}
}

// waitOffered waits until a's handlers offer n tasks of topic to its
// consumers.
func waitOffered(t *testing.T, a *api, topic string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for serve.Offered(a.srv, topic) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks of %s offered after a minute; want %d", serve.Offered(a.srv, topic), topic, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOneMillisecondOrder: the jobs of one bulk publish, enqueued in one
// millisecond and spread over the partitions of their queue (a topic of
// 4, or the lane's), are peeked and handed out in the order published:
// their generated IDs order them (onceq.CompareSubmissions), not the
// partition each landed in.
func TestOneMillisecondOrder(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(4))
		tok := a.token("shop", false)
		code, body := a.do("PUT", "/api/shop/fifo/bulk", tok, `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]`)
		if code != 201 {
			t.Fatalf("bulk: %d %v", code, body)
		}
		var ids []string
		for _, id := range body["job_ids"].([]any) {
			ids = append(ids, id.(string))
		}
		parts := map[float64]bool{}
		for _, id := range ids {
			_, task := a.do("GET", "/api/shop/fifo/task/"+id, tok, "")
			rec, _ := task["task"].(map[string]any)
			parts[rec["partition"].(float64)] = true
		}
		if len(parts) < 2 {
			t.Fatalf("16 jobs in partitions %v; want them spread", slices.Collect(maps.Keys(parts)))
		}
		if code, head := a.do("GET", "/api/shop/fifo/peek", tok, ""); code != 200 || head["job_id"] != ids[0] {
			t.Fatalf("peek: %d %v; want the first published, %s", code, head, ids[0])
		}
		// A consumer that waits takes whichever job is offered first.
		first := consumeOne(t, a, tok, "/api/shop/fifo?ttr=60&timeout=30").JobID
		want := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == first })
		waitOffered(t, a, serve.QueueOf(a.srv, "shop", "fifo"), len(want))
		var got []string
		for range want {
			got = append(got, consumeOne(t, a, tok, "/api/shop/fifo?ttr=60&timeout=30").JobID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("handed out %v; want %v", got, want)
		}
	})
}
