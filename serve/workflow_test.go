package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/serve"
	"github.com/onceq/onceq/workflow"
)

// TestWorkflows: a bulk publish takes workflows beside tasks (a chord,
// and a task that depends on another of the same request), answers their
// IDs, and the workflow endpoints show them succeed; bad workflow
// elements are refused naming their path, and another namespace's token
// cannot read a workflow.
func TestWorkflows(t *testing.T) {
	a := start(t, serve.CreateQueues(2))
	tok := a.token("shop", false)
	code, body := a.do("POST", "/api/shop/orders/bulk", tok, `[
		{"id":"daily","chord":{"group":[{"payload":"eu"},{"payload":"us","queue":"render"}],"callback":{"queue":"render","id":"merge"}}},
		{"id":"ship-7","depends_on":["pay-7"]},
		{"id":"pay-7","payload":"x"}]`)
	jobs, _ := body["jobs"].([]any)
	if code != 201 || len(jobs) != 3 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	for i, want := range []string{"daily", "shop.orders/ship-7", "pay-7"} {
		j := jobs[i].(map[string]any)
		if j["job_id"] != want || (j["workflow"] == true) != (i < 2) {
			t.Fatalf("job %d: %v; want %s", i, j, want)
		}
	}
	for _, tc := range []struct {
		body, field, want string
	}{
		{`[{"chain":[]}]`, "[0]", "chain: an empty list"},
		{`[{"chain":[{"payload":"a"},{"group":[{"delay":"x"}]}]}]`, "[0].chain[1].group[0].delay", "want a duration"},
		{`[{"chain":[{"queue":"a b"}]}]`, "[0]", "chain[0].queue"},
		{`[{"payload":"a","depends_on":[{"queue":"x y","id":"a"}]}]`, "[0]", "depends_on[0].queue"},
	} {
		code, body := a.do("POST", "/api/shop/orders/bulk", tok, tc.body)
		if code != 400 || body["field"] != tc.field || !strings.Contains(fmt.Sprint(body["error"]), tc.want) {
			t.Errorf("bulk %s: %d %v; want 400 naming %s and %q", tc.body, code, body, tc.field, tc.want)
		}
	}

	cycle := `[{"id":"x","depends_on":["y"]},{"id":"y","depends_on":[{"queue":"orders","id":"x"}]}]`
	if code, body := a.do("POST", "/api/shop/orders/bulk", tok, cycle); code != 400 || !strings.Contains(fmt.Sprint(body["error"]), "dependency cycle") {
		t.Errorf("bulk of a dependency cycle: %d %v; want 400", code, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	w, err := consumer.New(consumer.Conn(a.conn), consumer.Queues("shop.orders", "shop.render"), consumer.CheckpointDir(filepath.Join(dir, "w")),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			return task.SetResult(append([]byte("done "), task.Payload...))
		})))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := workflow.NewService(workflow.Conn(a.conn), workflow.Dir(filepath.Join(dir, "wf")))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- w.Run(ctx) }()
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		<-done
	}()
	code, body = a.do("GET", "/api/shop/orders/workflow/daily/wait?timeout=60", tok, "")
	root, _ := body["root"].(map[string]any)
	if code != 200 || body["state"] != "succeeded" || root["kind"] != "chord" {
		t.Fatalf("workflow wait daily: %d %v", code, body)
	}
	code, body = a.do("GET", "/api/shop/orders/workflow/shop.orders%2Fship-7/wait?timeout=60", tok, "")
	if code != 200 || body["state"] != "succeeded" {
		t.Fatalf("workflow wait of the dependent task: %d %v", code, body)
	}
	if code, body = a.do("GET", "/api/shop/orders/workflow/never", tok, ""); code != 404 || body["field"] != "id" {
		t.Fatalf("workflow never submitted: %d %v", code, body)
	}
	other := a.token("other", false)
	if code, body = a.do("GET", "/api/other/orders/workflow/daily", other, ""); code != 404 || strings.Contains(fmt.Sprint(body["error"]), "shop") {
		t.Fatalf("another namespace's workflow: %d %v; want 404 naming nothing of shop's", code, body)
	}

	// Cancel: a workflow waiting for a task never submitted is canceled
	// (202), and ends failed without running; a done one is left (200);
	// another namespace's token and a read-only one are refused.
	code, body = a.do("POST", "/api/shop/orders/bulk", tok, `[{"id":"ship-8","depends_on":["pay-8"]}]`)
	if code != 201 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	// The bulk's answer comes once its transaction commits: the workflow
	// is known (pending) from then on, and waiting once the workflow
	// service took it.
	for deadline := time.Now().Add(time.Minute); ; {
		code, body = a.do("GET", "/api/shop/orders/workflow/shop.orders%2Fship-8", tok, "")
		if code == 200 && body["state"] == "waiting" {
			break
		}
		if code != 200 || body["state"] != "pending" || time.Now().After(deadline) {
			t.Fatalf("the waiting workflow: %d %v", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body = a.do("DELETE", "/api/other/orders/workflow/shop.orders%2Fship-8", other, ""); code != 404 {
		t.Fatalf("cancel of another namespace's workflow: %d %v; want 404", code, body)
	}
	if code, body = a.do("DELETE", "/api/shop/orders/workflow/shop.orders%2Fship-8", a.token("shop", true), ""); code != 403 {
		t.Fatalf("cancel with a read-only token: %d %v; want 403", code, body)
	}
	if code, body = a.do("DELETE", "/api/shop/orders/workflow/shop.orders%2Fship-8", tok, ""); code != 202 || body["state"] != "waiting" {
		t.Fatalf("cancel of the waiting workflow: %d %v; want 202 and its status before", code, body)
	}
	code, body = a.do("GET", "/api/shop/orders/workflow/shop.orders%2Fship-8/wait?timeout=60", tok, "")
	if start, _ := body["start"].(map[string]any); code != 200 || body["state"] != "failed" || start["state"] != "canceled" {
		t.Fatalf("the canceled workflow: %d %v", code, body)
	}
	if code, body = a.do("DELETE", "/api/shop/orders/workflow/daily", tok, ""); code != 200 || body["state"] != "succeeded" {
		t.Fatalf("cancel of a done workflow: %d %v; want 200, left as it is", code, body)
	}
	if code, body = a.do("DELETE", "/api/shop/orders/workflow/never", tok, ""); code != 404 {
		t.Fatalf("cancel of a workflow never submitted: %d %v; want 404", code, body)
	}

	// Known IDs say so; a retry names the way when it cannot run.
	code, body = a.do("POST", "/api/shop/orders/bulk", tok, `[{"id":"daily","chain":[{"payload":"again"}]}]`)
	if jobs, _ := body["jobs"].([]any); code != 200 || len(jobs) != 1 ||
		jobs[0].(map[string]any)["workflow_state"] != "succeeded" || jobs[0].(map[string]any)["msg"] != "known, in state succeeded" {
		t.Fatalf("bulk of a known workflow: %d %v; want it known, succeeded", code, body)
	}
	for path, want := range map[string]string{"daily": "only a failed workflow", "shop.orders%2Fship-8": "under a new ID"} {
		code, body = a.do("POST", "/api/shop/orders/workflow/"+path+"/retry", tok, "")
		if code != 409 || !strings.Contains(fmt.Sprint(body["error"]), want) {
			t.Errorf("retry of %s: %d %v; want 409 naming %q", path, code, body, want)
		}
	}
	if code, body = a.do("POST", "/api/other/orders/workflow/daily/retry", other, ""); code != 404 || strings.Contains(fmt.Sprint(body), "shop") {
		t.Fatalf("retry of another namespace's workflow: %d %v; want 404 naming nothing of shop's", code, body)
	}
}

// TestRefusedBulkCreatesNothing: a bulk refused for any element makes
// none of its workflows' queues.
func TestRefusedBulkCreatesNothing(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	code, body := a.do("POST", "/api/shop/orders/bulk", tok, `[{"id":"wf-1","chain":[{"queue":"wfonly","payload":"a"}]},{"delay":"soon"}]`)
	if code != 400 || body["field"] != "[1].delay" {
		t.Fatalf("bulk: %d %v; want 400 naming [1].delay", code, body)
	}
	adm, err := broker.NewAdmin(a.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.DescribeTopic(context.Background(), "shop.wfonly"); !errors.Is(err, broker.ErrTopicNotFound) {
		t.Fatalf("the refused bulk's workflow queue: %v; want it not made", err)
	}
}

// TestWorkflowInputsOverHTTP: an HTTP pull consumer of a workflow step
// gets its input: a chord's callback the results of its 1,000 members in
// member order, each as its consumer ACKed it, and the chain's next step
// the callback's result.
func TestWorkflowInputsOverHTTP(t *testing.T) {
	const n = 1000
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf(`{"payload":%q}`, fmt.Sprint(i))
	}
	code, body := a.do("POST", "/api/shop/steps/bulk", tok, `[{"id":"flow","chain":[
		{"chord":{"group":[`+strings.Join(members, ",")+`],"callback":{"queue":"join","payload":"cb"}}},
		{"queue":"last","payload":"end"}]}]`)
	if code != 201 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	acks, failed := make(chan wfJob, n), make(chan error, n)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for j := range acks {
				if code, body := a.do("DELETE", "/api/shop/steps/job/"+url.PathEscape(j.JobID), tok, "result-"+string(j.Data)); code != 204 {
					failed <- fmt.Errorf("ACK of %s: %d %v", j.JobID, code, body)
				}
			}
		})
	}
	for got := 0; got < n; {
		for _, j := range consumeJobs(t, a, tok, "steps", 100) {
			if j.Input != nil {
				t.Fatalf("a group member with an input: %+v", j)
			}
			acks <- j
			got++
		}
	}
	close(acks)
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	cb := consumeJob(t, a, tok, "join")
	if string(cb.Data) != "cb" || len(cb.Results) != n {
		t.Fatalf("the chord's callback: payload %q, %d results; want cb, %d", cb.Data, len(cb.Results), n)
	}
	for i, r := range cb.Results {
		if want := fmt.Sprint("result-", i); string(r) != want {
			t.Fatalf("the callback's result %d is %q, want %q (the members' results in member order)", i, r, want)
		}
	}
	if code, body := a.do("DELETE", "/api/shop/join/job/"+url.PathEscape(cb.JobID), tok, "joined"); code != 204 {
		t.Fatalf("ACK: %d %v", code, body)
	}
	last := consumeJob(t, a, tok, "last")
	if string(last.Input) != "joined" || last.Results != nil {
		t.Fatalf("the chain's last step: %+v; want the callback's result as its input", last)
	}
}

// wfJob is a consumed job's fields a workflow step reads.
type wfJob struct {
	JobID   string `json:"job_id"`
	Data    []byte
	Input   []byte
	Results [][]byte
}

// consumeJob consumes one job of queue with its workflow fields.
func consumeJob(t *testing.T, a *api, tok, queue string) wfJob {
	t.Helper()
	var j wfJob
	consumeInto(t, a, tok, queue, 1, &j)
	return j
}

// consumeJobs consumes up to count jobs of queue, at least one.
func consumeJobs(t *testing.T, a *api, tok, queue string, count int) []wfJob {
	t.Helper()
	var js []wfJob
	consumeInto(t, a, tok, queue, count, &js)
	return js
}

// consumeInto consumes up to count jobs of queue into out: one object for
// count 1, an array for more, as lmstfy answers.
func consumeInto(t *testing.T, a *api, tok, queue string, count int, out any) {
	t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/shop/%s?ttr=60&timeout=30&count=%d", a.url, queue, count), nil)
	req.Header.Set("X-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("consume of %s: %d %v", queue, resp.StatusCode, err)
	}
}

// TestResubmittedWorkflowAnswer: a bulk publish of a workflow ID that is
// known writes nothing and says so: 200 "already known" (201 "published"
// once any element is new), the element with the workflow's state and
// the way on, and no task state (its start task's, "succeeded" for a
// workflow that started and failed at a step, is not the workflow's). A
// workflow that failed before it started names the HTTP retry as its way
// on.
func TestResubmittedWorkflowAnswer(t *testing.T) {
	a := start(t, serve.CreateQueues(1), serve.WorkflowService(false))
	tok := a.token("shop", false)
	ctx, cancel := context.WithCancel(context.Background())
	svcDone := make(chan error, 1)
	t.Cleanup(func() {
		cancel()
		if svc := <-svcDone; svc != nil && !errors.Is(svc, context.Canceled) {
			t.Errorf("workflow service: %v", svc)
		}
	})

	// nightly starts, and fails at its first step: taken, not acknowledged
	// within its ttr, with one try.
	line := `[{"id":"nightly","chain":[{"queue":"steps","payload":"a","max_attempts":1},{"queue":"steps","payload":"b"}]}]`
	if code, body := a.do("POST", "/api/shop/steps/bulk", tok, line); code != 201 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	// early never starts: its queue is gone when the service reads it.
	if code, body := a.do("POST", "/api/shop/steps/bulk", tok, `[{"id":"early","chain":[{"queue":"gone","payload":"x"}]}]`); code != 201 {
		t.Fatalf("bulk: %d %v", code, body)
	}
	adm, err := broker.NewAdmin(a.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.Kadm().DeleteTopics(ctx, "shop.gone"); err != nil {
		t.Fatal(err)
	}
	svc, err := workflow.NewService(workflow.Conn(a.conn), workflow.Dir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	go func() { svcDone <- svc.Run(ctx) }()
	code, body := a.do("GET", "/api/shop/steps?ttr=1&timeout=30", tok, "")
	if code != 200 || body["job_id"] != "shop/nightly/0" {
		t.Fatalf("consume of the first step: %d %v", code, body)
	}
	for _, id := range []string{"nightly", "early"} {
		code, body = a.do("GET", "/api/shop/steps/workflow/"+id+"/wait?timeout=60", tok, "")
		if code != 200 || body["state"] != "failed" {
			t.Fatalf("workflow %s: %d %v; want failed", id, code, body)
		}
	}

	for _, tc := range []struct{ id, line, way string }{
		{"nightly", line, "its steps ran under their IDs, which run once: submit it again under a new ID"},
		{"early", `[{"id":"early","chain":[{"queue":"steps","payload":"x"}]}]`,
			"it did not start: once its cause is fixed, retry it with POST /api/shop/steps/workflow/early/retry"},
	} {
		code, body = a.do("POST", "/api/shop/steps/bulk", tok, tc.line)
		jobs, _ := body["jobs"].([]any)
		if code != 200 || body["msg"] != "already known" || len(jobs) != 1 {
			t.Fatalf("bulk of the failed workflow %s again: %d %v; want 200, already known", tc.id, code, body)
		}
		j := jobs[0].(map[string]any)
		msg, _ := j["msg"].(string)
		if _, has := j["state"]; has || j["job_id"] != tc.id || j["new"] != false || j["workflow"] != true || j["workflow_state"] != "failed" ||
			!strings.HasPrefix(msg, "known, in state failed: ") || !strings.HasSuffix(msg, "; "+tc.way) {
			t.Errorf("the known workflow %s: %v; want its workflow_state failed, no task state, and the way on %q", tc.id, j, tc.way)
		}
	}
	code, body = a.do("POST", "/api/shop/steps/bulk", tok, `[{"id":"nightly","chain":[{"payload":"a"}]},{"payload":"new"}]`)
	if jobs, _ := body["jobs"].([]any); code != 201 || body["msg"] != "published" || len(jobs) != 2 || jobs[1].(map[string]any)["new"] != true {
		t.Fatalf("bulk of a known workflow and a new task: %d %v; want 201, published", code, body)
	}
}
