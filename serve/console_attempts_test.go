package serve_test

import (
	"context"
	"fmt"
	"strings"
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
	w, err := consumer.New(consumer.Conn(a.conn), consumer.Queues("shop.jobs"), consumer.CheckpointDir(t.TempDir()),
		consumer.Backoff(10*time.Millisecond, 1, 10*time.Millisecond),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			if task.Attempt < 3 {
				return fmt.Errorf("boom %d", task.Attempt)
			}
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		stop()
		<-done
	}()
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
