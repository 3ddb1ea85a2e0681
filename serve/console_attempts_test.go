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

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestConsoleTaskAttempts: a task's page lists every attempt, the failed
// ones with their error, start, end and duration, not the last alone.
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
