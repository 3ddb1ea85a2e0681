package serve_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestConsoleRunningTasks: a queue's running tab lists the tasks whose
// handlers run, each with its worker and how long it has run, and the
// home page counts them running, not waiting; a task's page says how long
// it has run. A quick task never shows there, and a task that finished
// leaves the tab.
func TestConsoleRunningTasks(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	for _, id := range []string{"quick-1", "slow-1", "later-1"} {
		if code, body := a.do("PUT", "/api/shop/jobs?id="+id, tok, "x"); code != 201 {
			t.Fatalf("publish %s: %d %v", id, code, body)
		}
	}
	release, done := make(chan struct{}), make(chan struct{})
	runWorker(t, a, func(ctx context.Context, task *consumer.Task) error {
		switch task.ID {
		case "quick-1":
			return nil
		case "later-1":
			<-done // starts once slow-1 ended: one slot
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, consumer.Queues("shop.jobs"), consumer.Concurrency(1), consumer.RecordRunningAfter(100*time.Millisecond))
	t.Cleanup(func() { close(done) }) // before the worker stops
	if code, body := a.do("GET", "/api/shop/jobs/job/quick-1/wait?timeout=60", tok, ""); code != 200 || body["done"] != true {
		t.Fatalf("wait: %d %v", code, body)
	}
	a.waitPage("/console/q/shop.jobs?state=running", tok, `data-id="slow-1"`)
	b := newBrowser(t, chromium)
	b.login(a.url, tok)
	b.run("the running tab", chromedp.Navigate(a.url+"/console/q/shop.jobs?state=running"), chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="slow-1"]`)), b.shot("running"))
	ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tasks tr[data-id]")].map(r => r.dataset.id)`))
	if err != nil || len(ids) != 1 {
		t.Fatalf("running tasks: %v (%v); want slow-1 alone", ids, err)
	}
	if worker := b.text(`#tasks tr[data-id="slow-1"] .worker`); worker == "" {
		t.Error("slow-1's worker is not shown")
	}
	if d := b.text(`#tasks tr[data-id="slow-1"] .runfor`); !regexp.MustCompile(`^[0-9.hms]+s$`).MatchString(d) {
		t.Errorf("slow-1 running for %q; want a duration", d)
	}
	b.run("home", chromedp.Navigate(a.url+"/console/"), chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="shop.jobs"]`)))
	row := `#queues tr[data-queue="shop.jobs"] `
	for cell, want := range map[string]string{"td.running": "1", "td.pending": "1", "td.succeeded": "1", "td.waiting": "1"} {
		if got := b.text(row + cell); got != want {
			t.Errorf("home page's %s: %q, want %s", cell, got, want)
		}
	}
	b.run("the task", chromedp.Navigate(a.url+"/console/q/shop.jobs/task/slow-1"), chromedp.WaitVisible(chromedp.CSS("#runfor")))
	if st := b.text("#state"); st != "running" {
		t.Errorf("slow-1's page: state %q, want running", st)
	}
	close(release)
	if code, body := a.do("GET", "/api/shop/jobs/job/slow-1/wait?timeout=60", tok, ""); code != 200 || body["done"] != true {
		t.Fatalf("wait: %d %v", code, body)
	}
	// later-1 runs now, in the slot slow-1 left: it shows running, and
	// slow-1 no longer does.
	a.waitPage("/console/q/shop.jobs?state=running", tok, `data-id="later-1"`)
	b.run("the running tab again", chromedp.Navigate(a.url+"/console/q/shop.jobs?state=running"), chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="later-1"]`)))
	ids, err = chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tasks tr[data-id]")].map(r => r.dataset.id)`))
	if err != nil || len(ids) != 1 {
		t.Errorf("running tasks after slow-1 ended: %v (%v); want later-1 alone", ids, err)
	}
}
