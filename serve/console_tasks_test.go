package serve_test

import (
	"context"
	"errors"
	"fmt"
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

// TestConsoleTaskAttempts: a task's page lists every attempt, the failed
// ones with their error, start, end and duration, not the last alone;
// the queue's page and the home page count its failed attempts.
func TestConsoleTaskAttempts(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	if code, body := a.do("PUT", "/api/shop/jobs?id=flaky-1&tries=3", tok, "x"); code != 201 {
		t.Fatalf("publish: %d %v", code, body)
	}
	runWorker(t, a, func(_ context.Context, task *consumer.Task) error {
		if task.Attempt < 3 {
			return fmt.Errorf("boom %d", task.Attempt)
		}
		return nil
	}, consumer.Queues("shop.jobs"), consumer.Backoff(10*time.Millisecond, 1, 10*time.Millisecond))
	if code, body := a.do("GET", "/api/shop/jobs/job/flaky-1/wait?timeout=60", tok, ""); code != 200 || body["done"] != true {
		t.Fatalf("wait: %d %v", code, body)
	}
	b := newBrowser(t, chromium)
	b.login(a.url, tok)
	b.run("the task", chromedp.Navigate(a.url+"/console/q/shop.jobs/task/flaky-1"), chromedp.WaitVisible(chromedp.CSS("#attempts")), b.shot("task-attempts"))
	for attempt, want := range map[string]string{"1": "1 retrying", "2": "2 retrying", "3": "3 succeeded"} {
		row := strings.Join(strings.Fields(b.text(`#attempts tr[data-attempt="`+attempt+`"]`)), " ")
		if !strings.HasPrefix(row, want) || attempt != "3" && !strings.HasSuffix(row, "boom "+attempt) {
			t.Errorf("attempt %s: %q, want %q and its error", attempt, row, want)
		}
	}
	b.run("the queue", chromedp.Navigate(a.url+"/console/q/shop.jobs"), chromedp.WaitVisible(chromedp.CSS("#failed")))
	if n := b.text("#failed"); n != "2" {
		t.Errorf("the queue's failed attempts: %q, want 2", n)
	}
	b.run("home", chromedp.Navigate(a.url+"/console/"), chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="shop.jobs"]`)))
	if n := b.text(`#queues tr[data-queue="shop.jobs"] td.failed`); n != "2" {
		t.Errorf("the home page's failed attempts of shop.jobs: %q, want 2", n)
	}
}

// TestConsoleRequeueAll: a dead task's page links its dead letter and
// requeues it; the dead letters page requeues every dead task at once,
// started over at attempt 1 when asked: each runs again and succeeds;
// and deletes them all once its box confirms it.
func TestConsoleRequeueAll(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	// Published before the worker starts: their publish makes the queue.
	for _, id := range []string{"d-1", "d-2"} {
		if code, body := a.do("PUT", "/api/shop/jobs?tries=1&id="+id, tok, "x"); code != 201 {
			t.Fatalf("publish %s: %d %v", id, code, body)
		}
	}
	var failing atomic.Bool
	failing.Store(true)
	runWorker(t, a, func(_ context.Context, task *consumer.Task) error {
		if failing.Load() {
			return errors.New("smtp: 550 mailbox unavailable")
		}
		return task.SetResult([]byte(fmt.Sprintf("attempt %d", task.Attempt)))
	}, consumer.Queues("shop.jobs"))
	for _, id := range []string{"d-1", "d-2"} {
		if code, body := a.do("GET", "/api/shop/jobs/job/"+id+"/wait?timeout=60", tok, ""); code != 200 || body["done"] != true {
			t.Fatalf("wait %s: %d %v", id, code, body)
		}
	}
	failing.Store(false)
	b := newBrowser(t, chromium)
	b.login(a.url, tok)
	// A dead task's page links its dead letter and requeues it.
	b.run("a dead task", chromedp.Navigate(a.url+"/console/q/shop.jobs/task/d-1"), chromedp.WaitVisible(chromedp.CSS("#deadletter")))
	b.run("requeue it", chromedp.Click(chromedp.CSS("#reset")), chromedp.Click(chromedp.CSS("#requeue")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if msg, h := b.text("#flash"), b.text("h1"); msg != "requeued d-1" || h != "Task d-1" {
		t.Fatalf("after requeueing d-1 from its page: %q on %q", msg, h)
	}
	// Then every one: d-1's letter a second time, which runs it no more.
	b.run("dead letters", chromedp.Navigate(a.url+"/console/q/shop.jobs/deadletters"), chromedp.WaitVisible(chromedp.CSS(`#letters tr[data-id="d-2"]`)))
	b.run("requeue all", chromedp.Click(chromedp.CSS("#reset")), chromedp.Click(chromedp.CSS("#requeueall")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if msg := b.text("#flash"); msg != "requeued 2 dead letters" {
		t.Fatalf("after requeue all: %q", msg)
	}
	deadline := time.Now().Add(time.Minute)
	for _, id := range []string{"d-1", "d-2"} {
		for {
			_, body := a.do("GET", "/api/shop/jobs/task/"+id, tok, "")
			task, _ := body["task"].(map[string]any)
			if task["state"] == "succeeded" {
				if task["attempt"] != 1.0 {
					t.Fatalf("%s requeued with its attempts reset ran as attempt %v", id, task["attempt"])
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after requeue all: %v; want succeeded", id, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Delete all: refused without its box ticked, then every letter gone.
	b.run("dead letters again", chromedp.Navigate(a.url+"/console/q/shop.jobs/deadletters"), chromedp.WaitVisible(chromedp.CSS(`#letters tr[data-id="d-2"]`)))
	b.run("delete unconfirmed", chromedp.Click(chromedp.CSS("#deleteall")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if msg := b.text("#flash"); !strings.HasPrefix(msg, "nothing deleted: tick the box") {
		t.Fatalf("Delete all without its box: %q", msg)
	}
	noFlash := chromedp.Evaluate[chromedp.Void](`document.querySelector("#flash")?.remove()`)
	b.run("delete", noFlash, chromedp.Click(chromedp.CSS("#confirmdelete")), chromedp.Click(chromedp.CSS("#deleteall")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if msg, letters := b.text("#flash"), b.text("#letters"); msg != "deleted the dead letters of jobs" || !strings.Contains(letters, "No dead letters.") {
		t.Fatalf("after Delete all: %q, letters %q", msg, letters)
	}
}

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
	// The flash comes first on the page: the list is read once its
	// first row is there too.
	b.run("cancel b-2h", chromedp.Click(chromedp.CSS(`#tasks tr[data-id="b-2h"] .cancel`)), chromedp.WaitVisible(chromedp.CSS("#flash")),
		chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-id="a-1h"]`)))
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
