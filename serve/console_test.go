package serve_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// screenshotDir is where TestConsole writes a screenshot of each page:
// $ONCEQ_SCREENSHOTS, else bin/screenshots at the repository's root.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("ONCEQ_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("..", "bin", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestConsole drives the console in headless Chromium: log in, see a
// queue, open a task with its result and payload, requeue a dead letter,
// pause and resume the queue, and a read-only token without the buttons;
// each asserted on the page's DOM, each page saved as a screenshot.
func TestConsole(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.CreateQueues(2), serve.DataDir(t.TempDir()))
	tok, ro := a.token("shop", false), a.token("shop", true)
	for _, p := range []string{"/api/shop/jobs?id=ok-1", "/api/shop/jobs?id=bad-1&tries=1"} {
		body := map[bool]string{true: "fail", false: `{"to":"ada@example.com"}`}[strings.Contains(p, "bad")]
		if code, b := a.do("PUT", p, tok, body); code != 201 {
			t.Fatalf("publish %s: %d %v", p, code, b)
		}
	}
	w, err := consumer.New(consumer.Conn(a.conn), consumer.Queues("shop.jobs"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
			if string(task.Payload) == "fail" {
				return errors.New("smtp: 550 mailbox unavailable")
			}
			return task.SetResult([]byte("sent"))
		})))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		<-done
	}()
	for _, id := range []string{"ok-1", "bad-1"} {
		if code, b := a.do("GET", "/api/shop/jobs/job/"+id+"/wait?timeout=60", tok, ""); code != 200 || b["done"] != true {
			t.Fatalf("wait %s: %d %v", id, code, b)
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelC := chromedp.NewContext(actx)
	defer cancelC()
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelT()
	dir := screenshotDir(t)
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			b, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Log in: the console sends a visitor without a token to the login.
	run("login page", chromedp.Navigate(a.url+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")), shot("login"))
	run("log in", chromedp.SendKeys(chromedp.CSS("#token"), tok), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="shop.jobs"]`)), shot("queues"))
	if who := text("#who"); !strings.Contains(who, "namespace shop") {
		t.Fatalf("header after login: %q", who)
	}
	// A queue and its tasks.
	run("queue", chromedp.Click(chromedp.CSS(`#queues tr[data-queue="shop.jobs"] a`)), chromedp.WaitVisible(chromedp.CSS("#tasks")), shot("queue"))
	if tasks := text("#tasks"); !strings.Contains(tasks, "ok-1") || !strings.Contains(tasks, "bad-1") || !strings.Contains(tasks, "succeeded") {
		t.Fatalf("the queue's tasks: %q", tasks)
	}
	// A task, found by its ID.
	run("find a task", chromedp.SendKeys(chromedp.CSS("#search"), "ok-1"), chromedp.Click(chromedp.CSS("#find")),
		chromedp.WaitVisible(chromedp.CSS("#record")), shot("task"))
	if st, res, payload := text("#state"), text("#result"), text("#payload"); st != "succeeded" || res != "sent" || !strings.Contains(payload, "ada@example.com") {
		t.Fatalf("task page: state %q, result %q, payload %q", st, res, payload)
	}
	// Dead letters: requeue the dead task.
	run("dead letters", chromedp.Navigate(a.url+"/console/q/shop.jobs/deadletters"), chromedp.WaitVisible(chromedp.CSS(`#letters tr[data-id="bad-1"]`)), shot("deadletters"))
	if row := text(`#letters tr[data-id="bad-1"]`); !strings.Contains(row, "smtp: 550") {
		t.Fatalf("dead letter row: %q", row)
	}
	run("requeue", chromedp.Click(chromedp.CSS(`#letters tr[data-id="bad-1"] .requeue`)), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if flash := text("#flash"); flash != "requeued bad-1" {
		t.Fatalf("after requeue: %q", flash)
	}
	// Pause and resume.
	run("pause", chromedp.Navigate(a.url+"/console/q/shop.jobs"), chromedp.Click(chromedp.CSS("#pause")), chromedp.WaitVisible(chromedp.CSS("#paused")), shot("paused"))
	if paused, _ := a.do("GET", "/api/shop/jobs/stats", tok, ""); paused != 200 {
		t.Fatalf("stats: %d", paused)
	}
	if _, st := a.do("GET", "/api/shop/jobs/stats", tok, ""); st["paused"] != true {
		t.Fatalf("the queue is not paused after the console's pause: %v", st)
	}
	run("resume", chromedp.Click(chromedp.CSS("#resume")), chromedp.WaitVisible(chromedp.CSS("#pause")))
	if _, st := a.do("GET", "/api/shop/jobs/stats", tok, ""); st["paused"] != false {
		t.Fatalf("the queue is still paused after the console's resume: %v", st)
	}
	run("delay ladder", chromedp.Navigate(a.url+"/console/delay"), chromedp.WaitVisible(chromedp.CSS("#buckets")), shot("delay"))
	run("groups", chromedp.Navigate(a.url+"/console/groups"), chromedp.WaitVisible(chromedp.CSS(`h2[data-group="onceq"]`)), shot("groups"))
	if lag := text("table.lag"); !strings.Contains(lag, "shop.jobs") {
		t.Fatalf("the worker's group on the groups page: %q", lag)
	}

	// Read-only: the pages, without their buttons.
	run("log out, log in read-only", chromedp.Navigate(a.url+"/console/login"), chromedp.SendKeys(chromedp.CSS("#token"), ro),
		chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#queues")),
		chromedp.Navigate(a.url+"/console/q/shop.jobs"), chromedp.WaitVisible(chromedp.CSS("#tasks")))
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#pause, #resume").length`))
	if err != nil {
		t.Fatal(err)
	}
	if buttons != 0 || !strings.Contains(text("#who"), "read-only") {
		t.Fatalf("read-only page: %d pause/resume buttons", buttons)
	}
}
