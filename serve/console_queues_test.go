package serve_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve"
	"github.com/onceq/onceq/workflow"
)

// createQueues creates queues with their task records topics, as a
// worker's start does, in a few requests.
func createQueues(t *testing.T, conn broker.Conn, queues ...string) {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	var specs []broker.TopicSpec
	for _, q := range queues {
		specs = append(specs, broker.TopicSpec{Name: q, Partitions: 1}, broker.TopicSpec{Name: broker.RecordsTopic(q), Partitions: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.EnsureTopics(ctx, specs); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleQueuePages drives the queue list in headless Chromium over
// 250 queues of namespace shop (and one of another namespace, never
// listed): three pages of at most 100 in name order, next and previous,
// and a filter that finds ten.
func TestConsoleQueuePages(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.Scheduler(false))
	queues := []string{"other.p-000"}
	for i := range 250 {
		queues = append(queues, fmt.Sprintf("shop.p-%03d", i))
	}
	createQueues(t, a.conn, queues...)
	tok := a.token("shop", true)
	// A page answers with the statistics its queues' views could load in
	// time, and says so; on a loaded machine the first loads of a hundred
	// views may take longer than a page waits. The views stay loaded.
	a.waitPage("/console/", tok, `data-queue="shop.p-099"`)

	b := newBrowser(t, chromium)
	b.login(a.url, tok)
	rows := func() []string {
		t.Helper()
		qs, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#queues tr[data-queue]")].map(r => r.dataset.queue)`))
		if err != nil {
			t.Fatal(err)
		}
		return qs
	}
	want := func(page, shown string, first, last int) {
		t.Helper()
		qs := rows()
		if len(qs) != last-first+1 || qs[0] != fmt.Sprintf("shop.p-%03d", first) || qs[len(qs)-1] != fmt.Sprintf("shop.p-%03d", last) {
			t.Fatalf("%s: %d queues, %v ... %v; want shop.p-%03d to shop.p-%03d", page, len(qs), qs[:min(len(qs), 1)], qs[max(len(qs)-1, 0):], first, last)
		}
		if got := b.text("#shown"); got != shown {
			t.Fatalf("%s: %q, want %q", page, got, shown)
		}
	}
	links := func() (prev, next int) {
		t.Helper()
		n, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]int](`[document.querySelectorAll(".bar .prev").length, document.querySelectorAll(".bar .next").length]`))
		if err != nil {
			t.Fatal(err)
		}
		return n[0], n[1]
	}
	want("page 1", "1–100 of 250 queues", 0, 99)
	if p, n := links(); p != 0 || n != 1 {
		t.Fatalf("page 1: %d previous and %d next links", p, n)
	}
	b.run("page 2", chromedp.Click(chromedp.CSS(".bar .next")), chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="shop.p-100"]`)), b.shot("queues-page2"))
	want("page 2", "101–200 of 250 queues", 100, 199)
	b.run("page 3", chromedp.Click(chromedp.CSS(".bar .next")), chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="shop.p-249"]`)))
	want("page 3", "201–250 of 250 queues", 200, 249)
	if p, n := links(); p != 1 || n != 0 {
		t.Fatalf("page 3: %d previous and %d next links", p, n)
	}
	b.run("back to page 2", chromedp.Click(chromedp.CSS(".bar .prev")), chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="shop.p-100"]`)))
	want("page 2 again", "101–200 of 250 queues", 100, 199)
	b.run("filter", chromedp.SendKeys(chromedp.CSS("#filter"), "p-24"), chromedp.Click(chromedp.CSS("#filterbtn")),
		chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="shop.p-240"]`)), b.shot("queues-filter"))
	want("filter p-24", `1–10 of 10 queues matching “p-24”`, 240, 249)
	if p, n := links(); p != 0 || n != 0 {
		t.Fatalf("filtered: %d previous and %d next links", p, n)
	}

	ops := a.token("*", true)
	if code, _, body := a.page("GET", "/console/?filter=p-000", ops, nil); code != 200 || !strings.Contains(body, `data-queue="other.p-000"`) || !strings.Contains(body, "1–2 of 2 queues") {
		t.Fatalf("an operator's filter: %d\n%s", code, body)
	}
	for q, want := range map[string]string{
		"after=a%20b":                        "after: \"a b\"",
		"after=shop.p-001&before=shop.p-9":   "not both",
		"filter=" + strings.Repeat("x", 250): "filter: want text of at most 249 bytes",
	} {
		if code, _, body := a.page("GET", "/console/?"+q, tok, nil); code != 400 || !strings.Contains(body, want) {
			t.Errorf("/console/?%.40s: %d, want 400 with %q in\n%.2000s", q, code, want, body)
		}
	}
}

// TestConsoleWorkflowRetry: a workflow that failed before it started (a
// queue that did not exist) shows a retry button; clicked in headless
// Chromium once the queue exists, the workflow runs.
func TestConsoleWorkflowRetry(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a, p := startWorkflows(t, "shop.fetch")
	ops, opsRO := a.token("*", false), a.token("*", true)
	start, err := workflow.Prepare("late", workflow.Chain(
		workflow.Task(onceq.Task{Queue: "shop.fetch", Payload: []byte("sales")}),
		workflow.Task(onceq.Task{Queue: "shop.later", Payload: []byte("mail")})), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Submit(context.Background(), start); err != nil { // unchecked: shop.later does not exist
		t.Fatal(err)
	}
	path := "/console/workflow?id=late"
	a.waitPage(path, ops, `id="wfstate">failed`)
	if code, _, body := a.page("GET", path, opsRO, nil); code != 200 || strings.Contains(body, `id="retry"`) {
		t.Fatalf("a failed workflow for a read-only token: %d, with a retry button:\n%s", code, body)
	}
	testutil.CreateTopic(t, a.conn, "shop.later", 1)

	b := newBrowser(t, chromium)
	b.login(a.url, ops)
	b.run("the failed workflow", chromedp.Navigate(a.url+path), chromedp.WaitVisible(chromedp.CSS("#retry")), b.shot("workflow-retry"))
	if why := b.text("#wfreason"); !strings.Contains(why, "shop.later") {
		t.Fatalf("the failed workflow's reason: %q", why)
	}
	b.run("retry it", chromedp.Click(chromedp.CSS("#retry")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if flash := b.text("#flash"); flash != "retried: its start task runs again" {
		t.Fatalf("after retry: %q", flash)
	}
	// Its first step runs; the second waits in shop.later, which no
	// worker of this test reads.
	a.waitPage(path, ops, `id="wfstate">running`)
	if code, loc, flash := a.act("/console/workflow/retry", ops, url.Values{"id": {"late"}}); code != 303 || !strings.Contains(flash, "only a failed workflow") {
		t.Fatalf("a second retry: %d to %q, flash %q", code, loc, flash)
	}
	if code, _, _ := a.page("POST", "/console/workflow/retry", opsRO, url.Values{"id": {"late"}}); code != 403 {
		t.Fatalf("a retry with a read-only token: %d", code)
	}
}

// waitPage requests a console page until its body holds want.
func (a *api) waitPage(path, token, want string) {
	a.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, _, body := a.page("GET", path, token, nil)
		if code == 200 && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("%s: %d, want %q in\n%s", path, code, want, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConsoleLaneQueues drives a lane's queues in headless Chromium: the
// lane's row on the queue list links to its 150 lane queues (two pages,
// a filter by the start of their names), a lane queue's page lists its
// task and pauses it, and a namespace's token sees none of them.
func TestConsoleLaneQueues(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.Scheduler(false))
	testutil.CreateTopic(t, a.conn, "fn", 2)
	p, err := producer.New(producer.Conn(a.conn))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 150
	err = p.Tx(ctx, func(tx *producer.Tx) error {
		for i := range n {
			if err := tx.SubmitPending(onceq.Task{Queue: fmt.Sprintf("fn/q-%03d", i), ID: fmt.Sprintf("t-%03d", i), Payload: []byte("x")}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ops := a.token("*", false)
	a.waitPage("/console/?filter=fn", ops, fmt.Sprintf(`%d lane queues</a>`, n))

	b := newBrowser(t, chromium)
	b.login(a.url, ops)
	lanes := func() []string {
		t.Helper()
		qs, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#queues tr[data-queue]")].map(r => r.dataset.queue)`))
		if err != nil {
			t.Fatal(err)
		}
		return qs
	}
	b.run("the lane", chromedp.Navigate(a.url+"/console/?filter=fn"), chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="fn"] .lanes`)))
	// Its row counts the lane in total: the 150 tasks of its lane queues,
	// pending (the first state's column).
	if got := b.text(`#queues tr[data-queue="fn"] td.num`); got != fmt.Sprint(n) {
		t.Fatalf("the lane's row counts %q pending, want %d, the lane in total", got, n)
	}
	b.run("its lane queues", chromedp.Click(chromedp.CSS(`#queues tr[data-queue="fn"] .lanes`)),
		chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="fn/q-000"]`)), b.shot("lane-queues"))
	if qs := lanes(); len(qs) != 100 || qs[0] != "fn/q-000" || qs[99] != "fn/q-099" {
		t.Fatalf("the lane's first page: %d queues, %v", len(qs), qs)
	}
	if got := b.text("#shown"); got != "1–100 of 150 lane queues matching “fn/”" {
		t.Fatalf("the lane's first page says %q", got)
	}
	b.run("page 2", chromedp.Click(chromedp.CSS(".bar .next")), chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="fn/q-149"]`)))
	if qs := lanes(); len(qs) != 50 || qs[0] != "fn/q-100" {
		t.Fatalf("the lane's second page: %d queues, %v", len(qs), qs)
	}
	b.run("filter", chromedp.Navigate(a.url+"/console/?filter="+url.QueryEscape("fn/q-12")),
		chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="fn/q-120"]`)))
	if qs := lanes(); len(qs) != 10 || qs[9] != "fn/q-129" {
		t.Fatalf("the lane queues starting fn/q-12: %v", qs)
	}
	b.run("a lane queue", chromedp.Click(chromedp.CSS(`#queues tr[data-queue="fn/q-120"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/console/q/fn%2Fq-120/task/t-120"]`)),
		chromedp.Click(chromedp.CSS("#pause")), chromedp.WaitVisible(chromedp.CSS("#paused")), b.shot("lane-queue-paused"))
	if h := b.text("h1"); !strings.HasPrefix(h, "fn/q-120") {
		t.Fatalf("the lane queue's page is headed %q", h)
	}
	in, err := inspect.Open(inspect.Conn(a.conn))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if paused, err := in.Paused(ctx); err != nil || !paused["fn/q-120"] || paused["fn"] {
		t.Fatalf("paused after the lane queue's pause: %v, %v; want fn/q-120 alone", paused, err)
	}

	// A task a worker ran: its page shows the payload, read from the lane.
	w, err := consumer.New(consumer.Conn(a.conn), consumer.Queues("fn/q-001"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error { return task.SetResult([]byte("done")) })))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	a.waitPage("/console/q/fn%2Fq-001/task/t-001", ops, `<pre id="payload">x</pre>`)
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if code, _, body := a.page("GET", "/console/q/fn", ops, nil); code != 200 || !strings.Contains(body, `href="/console/?filter=fn%2f">150 lane queues</a>`) {
		t.Fatalf("the lane's page does not link its lane queues: %d\n%.3000s", code, body)
	}
	shop := a.token("shop", true)
	if code, _, body := a.page("GET", "/console/?filter=fn/", shop, nil); code != 200 || !strings.Contains(body, "no queue") || strings.Contains(body, `data-queue="fn/`) {
		t.Fatalf("a namespace's token lists a lane's queues: %d\n%.2000s", code, body)
	}
	if code, _, _ := a.page("GET", "/console/q/fn%2Fq-001", shop, nil); code != 403 {
		t.Fatalf("a namespace's token opens a lane queue's page: %d", code)
	}
	if code, _, body := a.page("GET", "/console/?filter="+url.QueryEscape("a b/"), ops, nil); code != 400 || !strings.Contains(body, "is no lane") {
		t.Fatalf("a filter naming no lane: %d\n%.2000s", code, body)
	}
}
