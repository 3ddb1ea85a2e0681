package serve_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestConsoleDueTasks: a queue's page lists the tasks waiting for their
// due time soonest first, with their due times, and cancels one from its
// row: the list comes back without it (its record ends canceled at once),
// and says what the cancel did.
func TestConsoleDueTasks(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.CreateQueues(2))
	tok := a.token("shop", false)
	for _, p := range []string{"?id=c-3h&delay=10800", "?id=a-1h&delay=3600", "?id=b-2h&delay=7200", "?id=now-1"} {
		if code, body := a.do("PUT", "/api/shop/jobs"+p, tok, "x"); code != 201 {
			t.Fatalf("publish %s: %d %v", p, code, body)
		}
	}
	b := newBrowser(t, chromium)
	b.login(a.url, tok)
	rows := func() []string {
		t.Helper()
		ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tasks tr[data-id]")].map(r => r.dataset.id)`))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	b.run("the queue", chromedp.Navigate(a.url+"/console/q/shop.jobs"), chromedp.WaitVisible(chromedp.CSS("#duetab")))
	if tab := b.text("#duetab"); tab != "due soonest (3)" {
		t.Fatalf("the due tab: %q, want it to count the 3 scheduled tasks", tab)
	}
	b.run("due soonest", chromedp.Click(chromedp.CSS("#duetab")), chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="a-1h"]`)), b.shot("due"))
	if ids := rows(); len(ids) != 3 || ids[0] != "a-1h" || ids[1] != "b-2h" || ids[2] != "c-3h" {
		t.Fatalf("due soonest first: %v, want a-1h b-2h c-3h", ids)
	}
	if due := b.text(`#tasks tr[data-id="a-1h"] .due`); len(due) < 20 {
		t.Fatalf("a-1h's due time: %q", due)
	}
	b.run("cancel b-2h", chromedp.Click(chromedp.CSS(`#tasks tr[data-id="b-2h"] .cancel`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if msg := b.text("#flash"); !strings.Contains(msg, "canceled task b-2h") {
		t.Fatalf("the cancel's flash: %q", msg)
	}
	if ids := rows(); len(ids) != 2 || ids[0] != "a-1h" || ids[1] != "c-3h" {
		t.Fatalf("due soonest after canceling b-2h: %v, want a-1h c-3h", ids)
	}
}

// TestConsoleRunNow: a task due later runs now from its page's Run now,
// once: its copy runs, and its delayed task, when it comes due, is
// dropped as a duplicate. A
// task whose ID the producer generated has no Run now: a copy would run
// it twice.
func TestConsoleRunNow(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	// Due in 8 s: later than the page's Run now takes, even on a busy
	// machine, and soon enough for the test to see it dropped.
	if code, body := a.do("PUT", "/api/shop/jobs?id=soon-1&delay=8", tok, "x"); code != 201 {
		t.Fatalf("publish: %d %v", code, body)
	}
	code, body := a.do("PUT", "/api/shop/jobs?delay=3600", tok, "x")
	anon, _ := body["job_id"].(string)
	if code != 201 || anon == "" {
		t.Fatalf("publish without an ID: %d %v", code, body)
	}
	var runs atomic.Int32
	runWorker(t, a, func(context.Context, *consumer.Task) error {
		runs.Add(1)
		return nil
	}, consumer.Queues("shop.jobs"))
	ctx := context.Background()
	b := newBrowser(t, chromium)
	b.login(a.url, tok)
	b.run("the generated one", chromedp.Navigate(a.url+"/console/q/shop.jobs/task/"+anon), chromedp.WaitVisible(chromedp.CSS("#payload")))
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll("#runnow").length`)); err != nil || n != 0 {
		t.Fatalf("%d Run now buttons (%v) for a task of a generated ID, want none", n, err)
	}
	b.run("soon-1", chromedp.Navigate(a.url+"/console/q/shop.jobs/task/soon-1"), chromedp.WaitVisible(chromedp.CSS("#runnow")))
	b.run("run it now", chromedp.Click(chromedp.CSS("#runnow")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if msg := b.text("#flash"); !strings.Contains(msg, "task soon-1 runs now") {
		t.Fatalf("after Run now: %q", msg)
	}
	if code, body := a.do("GET", "/api/shop/jobs/job/soon-1/wait?timeout=60", tok, ""); code != 200 || body["done"] != true {
		t.Fatalf("soon-1 after Run now: %d %v", code, body)
	}
	// The delayed task comes due and reaches the worker, which drops it
	// as a duplicate: both are in the queue, and the group has committed
	// past them.
	adm, err := broker.NewAdmin(a.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		recs, _ := testutil.ReadCommittedErr(a.conn, 5*time.Second, "shop.jobs")
		lags, err := adm.Kadm().Lag(ctx, "onceq")
		// Committed past the last task (a transaction marker may follow).
		if l, ok := lags["onceq"].Lag["shop.jobs"][0]; err == nil && ok && len(recs) == 2 && l.Commit.At > recs[1].Offset {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delayed soon-1 not consumed: %d records in the queue, lag %v (%v)", len(recs), lags, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("soon-1 ran %d times, want once: its copy, the delayed one dropped as a duplicate", n)
	}
}
