package serve_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve"
	"github.com/onceq/onceq/workflow"
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

// browser is a headless Chromium that a test drives through the console,
// each step's failure fatal, saving screenshots to screenshotDir.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

func newBrowser(t *testing.T, chromium string) *browser {
	// Chromium's own temporary directories go in the test's, which
	// the test removes once the browser has exited.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900), chromedp.Env("TMPDIR="+t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelT()
		cancelC()
		cancelA()
	})
	return &browser{t: t, ctx: ctx, dir: screenshotDir(t)}
}

// shot saves a screenshot of the whole page as name.png.
func (b *browser) shot(name string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		png, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return chromedp.Void{}, err
		}
		return chromedp.Void{}, os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644)
	}
}

// text is the text of the element sel selects, trimmed.
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// run takes the steps of what.
func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// fits checks the page for what a screenshot shows badly: a page wider
// than the window, a state wrapped over two lines.
func (b *browser) fits() {
	b.t.Helper()
	if w, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)); err != nil || w > 1280 {
		b.t.Errorf("the page is %d pixels wide (%v), wider than the window", w, err)
	}
	h, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`Math.max(0, ...[...document.querySelectorAll(".state")].map(e => e.offsetHeight))`))
	if err != nil || h > 24 {
		b.t.Errorf("a state is %d pixels high (%v): wrapped", h, err)
	}
}

// login logs in to the console at url with token.
func (b *browser) login(url, token string) {
	b.t.Helper()
	b.run("log in", chromedp.Navigate(url+"/console/login"), chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#queues")))
}

// TestConsole drives the console in headless Chromium: log in, see a
// queue, open a task with its result and payload, requeue a dead letter,
// pause and resume the queue, and a read-only token without the buttons;
// each asserted on the page's DOM, each page saved as a screenshot.
func TestConsole(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := start(t, serve.CreateQueues(2), serve.DataDir(t.TempDir()))
	tok, ro := a.token("shop", false), a.token("shop", true)
	for _, p := range []string{"/api/shop/jobs?id=ok-1", "/api/shop/jobs?id=bad-1&tries=1", "/api/shop/jobs?id=later-1&delay=3600&priority=7"} {
		body := map[bool]string{true: "fail", false: `{"to":"ada@example.com"}`}[strings.Contains(p, "bad")]
		if code, b := a.do("PUT", p, tok, body); code != 201 {
			t.Fatalf("publish %s: %d %v", p, code, b)
		}
	}
	runWorker(t, a, func(_ context.Context, task *consumer.Task) error {
		if string(task.Payload) == "fail" {
			return errors.New("smtp: 550 mailbox unavailable")
		}
		return task.SetResult([]byte("sent"))
	}, consumer.Queues("shop.jobs"))
	for _, id := range []string{"ok-1", "bad-1"} {
		if code, b := a.do("GET", "/api/shop/jobs/job/"+id+"/wait?timeout=60", tok, ""); code != 200 || b["done"] != true {
			t.Fatalf("wait %s: %d %v", id, code, b)
		}
	}

	b := newBrowser(t, chromium)
	run, text, shot := b.run, b.text, b.shot
	ctx := b.ctx

	// Log in: the console sends a visitor without a token to the login.
	run("login page", chromedp.Navigate(a.url+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")), shot("login"))
	run("log in", chromedp.SendKeys(chromedp.CSS("#token"), tok), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS(`#queues tr[data-queue="shop.jobs"]`)), shot("queues"))
	if who := text("#who"); !strings.Contains(who, "namespace shop") {
		t.Fatalf("header after login: %q", who)
	}
	// The namespace's queue is named as its API names it.
	if name := text(`#queues tr[data-queue="shop.jobs"] a`); name != "jobs" {
		t.Fatalf("the namespace's queue is shown as %q, want jobs, as the API names it", name)
	}
	// A queue and its tasks.
	run("queue", chromedp.Click(chromedp.CSS(`#queues tr[data-queue="shop.jobs"] a`)), chromedp.WaitVisible(chromedp.CSS("#tasks")), shot("queue"))
	if tasks := text("#tasks"); !strings.Contains(tasks, "ok-1") || !strings.Contains(tasks, "bad-1") || !strings.Contains(tasks, "succeeded") {
		t.Fatalf("the queue's tasks: %q", tasks)
	}
	if h := text("h1"); !strings.HasPrefix(h, "jobs") {
		t.Fatalf("the queue's page is headed %q, want jobs", h)
	}
	// Its chart of the tasks finished: the dead one apart, the axis named,
	// and the hour's error rate.
	if rate := text("#errrate"); rate != "50.0% (1 of 2 failed)" {
		t.Fatalf("the queue's error rate: %q, want 1 of 2", rate)
	}
	if top, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#done svg text.top").textContent`)); err != nil || top != "2 tasks" {
		t.Fatalf("the chart's axis is topped with %q (%v), want the busiest minute's count, 1 or 2, rounded up to an even 2", top, err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#done svg rect.failed").length`)); err != nil || n != 1 {
		t.Fatalf("%d bars of failed tasks (%v), want 1: bad-1's minute", n, err)
	}
	if prio := text("#by-priority"); prio != "Unfinished by priority: 7: 1" {
		t.Fatalf("the queue's unfinished tasks by priority: %q", prio)
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
	if _, st := a.do("GET", "/api/shop/jobs/stats", tok, ""); st["paused"] != true || fmt.Sprint(st["by_priority"]) != "map[7:1]" {
		t.Fatalf("the queue is not paused after the console's pause, or later-1 (priority 7) is not its one unfinished task: %v", st)
	}
	run("resume", chromedp.Click(chromedp.CSS("#resume")), chromedp.WaitVisible(chromedp.CSS("#pause")))
	if _, st := a.do("GET", "/api/shop/jobs/stats", tok, ""); st["paused"] != false {
		t.Fatalf("the queue is still paused after the console's resume: %v", st)
	}
	// A limit across workers: set, refused, lifted.
	// The page after an action has a flash of its own: the one before
	// goes first, so that waiting for a flash waits for that page.
	noFlash := chromedp.Evaluate[chromedp.Void](`document.querySelector("#flash")?.remove()`)
	flash := chromedp.WaitVisible(chromedp.CSS("#flash"))
	run("limit", chromedp.SendKeys(chromedp.CSS("#limit-rate"), "10/s"), chromedp.SendKeys(chromedp.CSS("#limit-running"), "5"),
		chromedp.Click(chromedp.CSS("#limit-set")), chromedp.WaitVisible(chromedp.CSS("#limit-lift")), shot("limit"))
	if l, now, flash := text("#limit"), text("#running-now"), text("#flash"); l != "rate 10/s, running 5" || now != "(0 running now)" || flash != "shop.jobs limit: rate 10/s, running 5" {
		t.Fatalf("after setting a limit: %q %q, flash %q", l, now, flash)
	}
	if _, l := a.do("GET", "/api/shop/jobs/limit", tok, ""); l["rate"] != "10/s" || l["running"] != 5.0 {
		t.Fatalf("the API's limit after the console's: %v", l)
	}
	run("bad limit", chromedp.SetValue(chromedp.CSS("#limit-rate"), "10"), noFlash, chromedp.Click(chromedp.CSS("#limit-set")), flash)
	if l, f := text("#limit"), text("#flash"); l != "rate 10/s, running 5" || !strings.Contains(f, "want <count>/<unit>") {
		t.Fatalf("a refused limit: %q, flash %q", l, f)
	}
	run("lift limit", noFlash, chromedp.Click(chromedp.CSS("#limit-lift")), flash)
	if l, f := text("#limit"), text("#flash"); l != "none" || f != "shop.jobs limit: none" {
		t.Fatalf("after lifting the limit: %q, flash %q", l, f)
	}
	run("delay ladder", chromedp.Navigate(a.url+"/console/delay"), chromedp.WaitVisible(chromedp.CSS("#buckets")), shot("delay"))
	run("groups", chromedp.Navigate(a.url+"/console/groups"), chromedp.WaitVisible(chromedp.CSS(`h2[data-group="onceq"]`)), shot("groups"))
	if lag := text("table.lag"); !strings.Contains(lag, "jobs") || strings.Contains(lag, "shop.jobs") {
		t.Fatalf("the worker's group on the groups page: %q", lag)
	}

	// Read-only: the pages, without their buttons.
	b.login(a.url, ro)
	run("read-only queue", chromedp.Navigate(a.url+"/console/q/shop.jobs"), chromedp.WaitVisible(chromedp.CSS("#tasks")))
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#pause, #resume, #limit-set").length`))
	if err != nil {
		t.Fatal(err)
	}
	if buttons != 0 || !strings.Contains(text("#who"), "read-only") {
		t.Fatalf("read-only page: %d pause, resume or limit buttons", buttons)
	}
}

// startWorkflows starts a server, whose workflow and delay services run
// the workflows, a worker of queues that runs their steps, and a
// producer to submit them. A step whose payload is "fail" fails for good;
// a chord's callback joins its members' results with "+"; any other step
// returns "<payload> done".
func startWorkflows(t *testing.T, queues ...string) (*api, *producer.Producer) {
	t.Helper()
	a := start(t)
	for _, q := range queues {
		testutil.CreateTopic(t, a.conn, q, 2)
	}
	runWorker(t, a, func(_ context.Context, task *consumer.Task) error {
		switch p := string(task.Payload); {
		case p == "fail":
			return consumer.SkipRetry(errors.New(`render: template "weekly" not found in /srv/reports/templates ` +
				`(searched weekly.html.tmpl, weekly.tmpl and weekly.txt.tmpl): check the template named in the report's configuration`))
		case strings.HasPrefix(string(task.Input), "["):
			rs, err := workflow.Results(task.Input)
			if err != nil {
				return consumer.SkipRetry(err)
			}
			return task.SetResult(bytes.Join(rs, []byte("+")))
		default:
			return task.SetResult([]byte(p + " done"))
		}
	}, consumer.Queues(queues...))
	p, err := producer.New(producer.Conn(a.conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return a, p
}

// submit submits workflow n as id and returns its ID.
func submit(t *testing.T, p *producer.Producer, id string, n workflow.Node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := workflow.Submit(ctx, p, id, n)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitWorkflow polls the API until workflow id, of namespace shop, is in
// state.
func (a *api) waitWorkflow(token, id, state string) {
	a.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := a.do("GET", "/api/shop/q/workflow/"+url.PathEscape(id), token, "")
		if code == 200 && body["state"] == state {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("workflow %s: %d %v; want %s", id, code, body, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// page requests a console page with token as HTTP basic auth's password,
// without following a redirect, and returns its status, its redirect and
// its body.
func (a *api) page(method, path, token string, form url.Values) (code int, location, body string) {
	a.t.Helper()
	code, location, body, _ = a.pageWith(method, path, token, form, nil)
	return code, location, body
}

// pageWith is page with cookies sent, and the cookies the answer sets.
func (a *api) pageWith(method, path, token string, form url.Values, cookies []*http.Cookie) (code int, location, body string, set []*http.Cookie) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		a.t.Fatal(err)
	}
	req.SetBasicAuth("", token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range cookies {
		req.AddCookie(c)
	}
	cl := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Location"), html.UnescapeString(string(b)), resp.Cookies()
}

// flashRe finds a console page's flash message.
var flashRe = regexp.MustCompile(`id="flash">([^<]*)<`)

// act posts a console action and, as a browser does, follows its
// redirect with the cookies it set: its status, where it went, and the
// flash message the page there shows ("" for none).
func (a *api) act(path, token string, form url.Values) (code int, location, flash string) {
	a.t.Helper()
	code, location, _, cookies := a.pageWith("POST", path, token, form, nil)
	if code != http.StatusSeeOther {
		return code, location, ""
	}
	_, _, body, _ := a.pageWith("GET", location, token, nil, cookies)
	if m := flashRe.FindStringSubmatch(body); m != nil {
		flash = m[1]
	}
	return code, location, flash
}

func render(n int) []workflow.Node {
	out := make([]workflow.Node, n)
	for i := range out {
		out[i] = workflow.Task(onceq.Task{Queue: "shop.render", Payload: fmt.Appendf(nil, "region-%02d", i)})
	}
	return out
}

// TestConsoleWorkflow drives the workflow page in headless Chromium: a
// chain that failed at a step, found with the search box, its reason,
// failed step, the step it never ran and its OnError callback; from the
// failed step's task page back to its workflow; and a chord of 30
// members that succeeded, with its output, its callback, its members
// counted by state and 20 of them listed.
func TestConsoleWorkflow(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a, p := startWorkflows(t, "shop.fetch", "shop.render", "shop.merge", "shop.mail", "shop.alerts")
	tok := a.token("shop", false)
	report := submit(t, p, "report-2026-w47", workflow.Chain(
		workflow.Task(onceq.Task{Queue: "shop.fetch", Payload: []byte("sales")}),
		workflow.Task(onceq.Task{Queue: "shop.render", Payload: []byte("fail")}),
		workflow.Task(onceq.Task{Queue: "shop.mail", Payload: []byte("to finance")}),
	).OnError(workflow.Task(onceq.Task{Queue: "shop.alerts", ID: "alert-report-2026-w47", Payload: []byte("page")})))
	nightly := submit(t, p, "nightly-2026-11-25", workflow.Chord(workflow.Group(render(30)...),
		workflow.Task(onceq.Task{Queue: "shop.merge"})))
	a.waitWorkflow(tok, report, "failed")
	a.waitWorkflow(tok, nightly, "succeeded")
	if code, body := a.do("GET", "/api/shop/alerts/job/alert-report-2026-w47/wait?timeout=60", tok, ""); code != 200 || body["done"] != true {
		t.Fatalf("the OnError callback: %d %v", code, body)
	}

	b := newBrowser(t, chromium)
	b.login(a.url, tok)
	b.run("search page", chromedp.Click(chromedp.CSS(`header a[href="/console/workflow"]`)), chromedp.WaitVisible(chromedp.CSS("#wfsearch")), b.shot("workflows"))
	// The latest workflows, filtered by state.
	listed := func() []string {
		t.Helper()
		ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#workflows tr[data-id]")].map(r => r.dataset.id + " " + r.querySelector(".state").textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := listed(); len(got) != 2 || !slices.Contains(got, nightly+" succeeded") || !slices.Contains(got, report+" failed") {
		t.Fatalf("the workflows listed: %q, want the chord succeeded and the chain failed", got)
	}
	b.run("the failed ones", chromedp.Navigate(a.url+"/console/workflow?state=failed"), chromedp.WaitVisible(chromedp.CSS("#workflows")))
	if got := listed(); len(got) != 1 || got[0] != report+" failed" {
		t.Fatalf("the failed workflows: %q, want the chain", got)
	}
	b.run("search page again", chromedp.Navigate(a.url+"/console/workflow"), chromedp.WaitVisible(chromedp.CSS("#wfsearch")))
	b.run("find the chain", chromedp.SendKeys(chromedp.CSS("#wfsearch"), report), chromedp.Click(chromedp.CSS("#wffind")),
		chromedp.WaitVisible(chromedp.CSS("#steps")), b.shot("workflow-failed"))
	if st, why := b.text("#wfstate"), b.text("#wfreason"); st != "failed" ||
		!strings.Contains(why, "step 1 (task shop.render/report-2026-w47/1) dead") || !strings.Contains(why, `template "weekly" not found`) {
		t.Fatalf("the failed chain: state %q, reason %q", st, why)
	}
	for path, want := range map[string][]string{
		"":     {"chain", "3 steps: 1 failed, 1 skipped, 1 succeeded", "failed"},
		"0":    {"task fetch report-2026-w47/0", "succeeded"},
		"1":    {"task render report-2026-w47/1", "dead", "1", `template "weekly" not found`},
		"2":    {"task", "report-2026-w47/2", "skipped", "not run: step 1 failed before it"},
		"err0": {"on error task alerts alert-report-2026-w47", "succeeded"},
	} {
		// Queues named as the namespace's API names them.
		row := strings.Join(strings.Fields(b.text(`#steps tr[data-path="`+path+`"]`)), " ")
		for _, w := range want {
			if !strings.Contains(row, w) {
				t.Errorf("the chain's step %q: %q, want %q in it", path, row, w)
			}
		}
	}
	b.fits()
	b.run("the failed step's task", chromedp.Click(chromedp.CSS(`#steps tr[data-path="1"] a`)), chromedp.WaitVisible(chromedp.CSS("#workflow")), b.shot("workflow-step"))
	if st, wf := b.text("#state"), b.text("#workflow"); st != "dead" || wf != report {
		t.Fatalf("the failed step's task page: state %q, workflow %q", st, wf)
	}
	b.run("back to its workflow", chromedp.Click(chromedp.CSS("#workflow")), chromedp.WaitVisible(chromedp.CSS("#wfstate")))
	if h := b.text("h1"); h != "Workflow "+report {
		t.Fatalf("the step's workflow link led to %q", h)
	}

	b.run("find the chord", chromedp.Clear(chromedp.CSS("#wfsearch")), chromedp.SendKeys(chromedp.CSS("#wfsearch"), nightly), chromedp.Click(chromedp.CSS("#wffind")),
		chromedp.WaitVisible(chromedp.CSS(`#steps tr[data-path="cb"]`)), b.shot("workflow-chord"))
	if st, out := b.text("#wfstate"), b.text("#output"); st != "succeeded" || !strings.HasPrefix(out, "region-00 done+region-01 done+") {
		t.Fatalf("the chord: state %q, output %q", st, out)
	}
	for sel, want := range map[string]string{
		`#steps tr[data-path=""]`:   "30 members: 30 succeeded",
		`#steps tr[data-path="cb"]`: "callback task merge nightly-2026-11-25/cb succeeded",
		`#steps tr[data-path="7"]`:  "7 task render nightly-2026-11-25/7 succeeded",
		`#steps tr.more`:            "10 more members not listed",
	} {
		if got := strings.Join(strings.Fields(b.text(sel)), " "); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q in it", sel, got, want)
		}
	}
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll("#steps tr[data-path]").length`)); err != nil || n != 1+20+1 {
		t.Errorf("the chord's rows: %d, %v; want the chord, 20 members and the callback", n, err)
	}
	b.fits()

	b.run("a malformed ID", chromedp.Navigate(a.url+"/console/workflow?id=a%23b"), chromedp.WaitVisible(chromedp.CSS("#error")), b.shot("workflow-bad-id"))
	if e := b.text("#error"); !strings.Contains(e, "'#' is reserved") {
		t.Fatalf("a malformed ID's page: %q", e)
	}

	// An operator sees a workflow that waits for its dependency, and
	// cancels it.
	ship := submit(t, p, "", workflow.Task(onceq.Task{Queue: "shop.mail", ID: "ship-7"}).After(workflow.Ref{Queue: "shop.fetch", ID: "pay-7"}))
	a.waitWorkflow(tok, ship, "waiting")
	b.login(a.url, a.token("*", false))
	b.run("a waiting workflow", chromedp.Navigate(a.url+"/console/workflow?id="+url.QueryEscape(ship)), chromedp.WaitVisible(chromedp.CSS("#cancel")), b.shot("workflow-waiting"))
	if st, why := b.text("#wfstate"), b.text("#wfreason"); st != "waiting" || !strings.Contains(why, "shop.fetch/pay-7") {
		t.Fatalf("the waiting workflow: state %q, reason %q", st, why)
	}
	b.run("cancel it", chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if flash := b.text("#flash"); flash != "canceled: it will not start" {
		t.Fatalf("after cancel: %q", flash)
	}
}

// TestConsoleWorkflowAccess: the workflow page answers a token whose
// namespace holds every step, and refuses another namespace's as the
// console refuses its queues; a workflow waiting for its dependencies
// shows its steps, and a read-write token that sees it cancels it; a
// malformed ID is a 400 page, an unknown one a 404.
func TestConsoleWorkflowAccess(t *testing.T) {
	a, p := startWorkflows(t, "shop.render", "shop.merge")
	tok, other := a.token("shop", false), a.token("other", false)
	ops, opsRO := a.token("*", false), a.token("*", true)
	daily := submit(t, p, "daily", workflow.Chord(workflow.Group(render(2)...), workflow.Task(onceq.Task{Queue: "shop.merge"})))
	a.waitWorkflow(tok, daily, "succeeded")

	code, _, body := a.page("GET", "/console/workflow?id=daily", tok, nil)
	if code != 200 || !strings.Contains(body, `id="wfstate">succeeded`) || !strings.Contains(body, "region-00 done+region-01 done") {
		t.Fatalf("the workflow's page for its namespace's token: %d\n%s", code, body)
	}
	code, _, body = a.page("GET", "/console/workflow?id=daily", other, nil)
	if code != 404 || strings.Contains(body, "shop.") || strings.Contains(body, "daily/0") {
		t.Fatalf("the workflow's page for another namespace's token: %d\n%s", code, body)
	}
	// The list of workflows: shop's token sees it, another's does not.
	if code, _, body := a.page("GET", "/console/workflow", tok, nil); code != 200 || !strings.Contains(body, `<tr data-id="daily">`) {
		t.Fatalf("the workflow list for its namespace's token: %d\n%s", code, body)
	}
	if code, _, body := a.page("GET", "/console/workflow", other, nil); code != 200 || strings.Contains(body, `data-id="daily"`) {
		t.Fatalf("the workflow list for another namespace's token: %d\n%s", code, body)
	}
	if code, _, body := a.page("GET", "/console/workflow?state=bogus", tok, nil); code != 400 || !strings.Contains(body, "bogus") || !strings.Contains(body, "want one of") {
		t.Fatalf("the workflow list of a bad state: %d\n%s", code, body)
	}
	for _, tc := range []struct {
		id   string
		code int
		want string
	}{
		{"a#b", 400, "'#' is reserved"},
		{strings.Repeat("x", 201), 400, "at most 200"},
		{"nightly", 404, "not found"},
	} {
		if code, _, body := a.page("GET", "/console/workflow?id="+url.QueryEscape(tc.id), tok, nil); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("workflow %.20q: %d, want %d and %q in\n%s", tc.id, code, tc.code, tc.want, body)
		}
	}

	// A workflow that waits for a task never submitted.
	ship := submit(t, p, "", workflow.Task(onceq.Task{Queue: "shop.render", ID: "ship-7"}).After(workflow.Ref{Queue: "shop.merge", ID: "pay-7"}))
	a.waitWorkflow(tok, ship, "waiting")
	path := "/console/workflow?id=" + url.QueryEscape(ship)
	if code, _, body := a.page("GET", path, tok, nil); code != 200 || !strings.Contains(body, `id="wfstate">waiting`) || !strings.Contains(body, "shop.render/ship-7") {
		t.Fatalf("a waiting workflow, whose steps show, for its namespace's token: %d\n%s", code, body)
	}
	if code, _, body := a.page("GET", path, other, nil); code != 404 || strings.Contains(body, "pay-7") {
		t.Fatalf("a waiting workflow for another namespace's token: %d\n%s", code, body)
	}
	code, _, body = a.page("GET", path, opsRO, nil)
	if code != 200 || !strings.Contains(body, `id="wfstate">waiting`) || !strings.Contains(body, "shop.merge/pay-7") || strings.Contains(body, `id="cancel"`) {
		t.Fatalf("a waiting workflow for an operator's read-only token: %d\n%s", code, body)
	}
	if code, _, body := a.page("GET", path, ops, nil); code != 200 || !strings.Contains(body, `id="cancel"`) {
		t.Fatalf("a waiting workflow for an operator's token: %d, no cancel button in\n%s", code, body)
	}
	form := url.Values{"id": {ship}}
	for _, tc := range []struct {
		token string
		code  int
	}{{opsRO, 403}, {other, 303}} {
		if code, _, body := a.page("POST", "/console/workflow/cancel", tc.token, form); code != tc.code {
			t.Errorf("cancel: %d, want %d:\n%s", code, tc.code, body)
		}
	}
	if code, _, body := a.page("POST", "/console/workflow/cancel", ops, url.Values{"id": {"a#b"}}); code != 400 || !strings.Contains(body, "reserved") {
		t.Errorf("cancel of a malformed ID: %d %s", code, body)
	}
	code, loc, flash := a.act("/console/workflow/cancel", ops, form)
	if code != 303 || loc != path || flash != "canceled: it will not start" {
		t.Fatalf("cancel: %d to %q, flash %q", code, loc, flash)
	}
	// It did not start: its steps, and so its namespace, are not known,
	// and only an operator sees it.
	deadline := time.Now().Add(time.Minute)
	for {
		code, _, body := a.page("GET", path, ops, nil)
		if code == 200 && strings.Contains(body, "did not start: canceled") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the canceled workflow: %d\n%s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _, body := a.page("GET", path, tok, nil); code != 404 || strings.Contains(body, "pay-7") {
		t.Fatalf("the canceled workflow that did not start, for its namespace's token: %d\n%s", code, body)
	}

	// A task's cancel says what it did: of a task never submitted,
	// nothing.
	code, loc, flash = a.act("/console/q/shop.render/task/never-7/cancel", ops, url.Values{})
	if code != 303 || !strings.Contains(flash, "no record of it") || !strings.Contains(flash, "nothing canceled") {
		t.Fatalf("cancel of a task never submitted: %d to %q, flash %q", code, loc, flash)
	}
	for _, r := range testutil.ReadCommitted(t, a.conn, 5*time.Second, ctltopic.Topic) {
		if string(r.Key) == string(ctltopic.CancelKey("shop.render", "never-7")) {
			t.Fatalf("the cancel of a task never submitted wrote %q", r.Value)
		}
	}
}

// TestConsoleQueueWithoutNamespace: a queue a Go producer named without a
// namespace shows on the console to an operator's token (namespace *),
// its pages open, and a namespace's token neither lists nor opens it.
func TestConsoleQueueWithoutNamespace(t *testing.T) {
	a, p := startWorkflows(t, "emails", "shop.render")
	ops, shop := a.token("*", true), a.token("shop", true)
	if _, err := p.Submit(context.Background(), onceq.Task{Queue: "emails", ID: "welcome-1", Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	// The queues show once their workers made their task records topics.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, body := a.page("GET", "/console/", ops, nil)
		if code == 200 && strings.Contains(body, `href="/console/q/emails"`) && strings.Contains(body, `href="/console/q/shop.render"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("home page for an operator's token: %d, want emails and shop.render listed in\n%s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var code int
	var body string
	for {
		code, _, body = a.page("GET", "/console/q/emails/task/welcome-1", ops, nil)
		if code == 200 && strings.Contains(body, "succeeded") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task page of emails/welcome-1 for an operator's token: %d\n%s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, _, body = a.page("GET", "/console/", shop, nil)
	if code != 200 || strings.Contains(body, "/console/q/emails") || !strings.Contains(body, `href="/console/q/shop.render"`) {
		t.Fatalf("home page for namespace shop's token: %d, want shop.render and not emails in\n%s", code, body)
	}
	if code, _, body := a.page("GET", "/console/q/emails", shop, nil); code != 403 || !strings.Contains(body, "not queue emails") {
		t.Fatalf("queue emails for namespace shop's token: %d\n%s", code, body)
	}
}

// TestConsoleLoginNext: a login goes on to its next= only within the
// console: never to another host, whatever the spelling.
func TestConsoleLoginNext(t *testing.T) {
	a := start(t)
	tok := a.token("shop", true)
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for next, want := range map[string]string{
		"/console/queue/shop.q?state=dead":     "/console/queue/shop.q?state=dead",
		"//evil.example":                       "/console/",
		"/\\evil.example":                      "/console/",
		"https://evil.example/console/":        "/console/",
		"/console/..//\\evil.example":          "/console/",
		"/console/../..//evil.example":         "/console/",
		"/console/%2e%2e/%2e%2e//evil.example": "/console/",
	} {
		resp, err := cl.PostForm(a.url+"/console/login", url.Values{"token": {tok}, "next": {next}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || got != want {
			t.Errorf("login with next=%q: %d to %q; want %q", next, resp.StatusCode, got, want)
		}
	}
}
