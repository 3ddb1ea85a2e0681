package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/periodic"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/workflow"
)

//go:embed assets
var consoleFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"since": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return sinceFor(t) + " ago"
	},
	"for": sinceFor,
	"at": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"path":  url.PathEscape,
	"shown": shown,
}).ParseFS(consoleFS, "assets/*.html"))

// sinceFor is how long ago t was, to the second: how long a task has
// run; "" for no time.
func sinceFor(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return time.Since(t).Round(time.Second).String()
}

const cookieName = "onceq_console"

// page is what every page template gets.
type page struct {
	Title string
	Token auth.Token
	// Strip is what the API leaves out of the names of the token's
	// queues, and the page too: for a namespace's token, the server's
	// lane and the namespace ("serve/shop." of "serve/shop.emails"), so
	// that the page names emails as the API does. Links keep the whole
	// name; an operator's token sees whole names.
	Strip    string
	ReadOnly bool
	Flash    string
	Error    string
	Data     any
}

// Deps is what the console stands on: the server's clients of Kafka and
// its stores, and its API, whose rules the console's pages and actions
// follow.
type Deps struct {
	Conn broker.Conn
	Log  *slog.Logger
	// Lane is the server's lane (empty: a topic per queue); Insecure
	// opens every page without a token (InsecureNoAuth).
	Lane      string
	Insecure  bool
	Tokens    *auth.Store
	In        *inspect.Inspector
	Ctl       *control.Controller
	P         *producer.Producer
	DLQ       *dlq.Reader
	Schedules *periodic.Store
	API       API
}

// API is what the console asks of the server's API: what both answer
// alike, by the API's rules.
type API interface {
	// QueueLimit is queue's limit as the limits topic holds it now,
	// and its tasks running under it.
	QueueLimit(ctx context.Context, queue string) (control.QueueLimit, error)
	// ParseLimit reads a limit from its rate and running parameters.
	ParseLimit(rate, running string) (control.Limit, error)
	// FindTask finds the task id of queue, whose record is rec: its
	// payload and headers, which the record does not keep.
	FindTask(ctx context.Context, queue, id string, rec *onceq.TaskRecord) (t onceq.Task, found bool, err error)
	// RemoveLetters removes the dead letters of queue below ends, by
	// partition.
	RemoveLetters(ctx context.Context, queue string, ends map[int32]int64) error
	// QueueNames lists the namespaces' queues.
	QueueNames(ctx context.Context) ([]string, error)
	// FindWorkflow reads the status of workflow id as namespace ns sees
	// it, and the ID it is kept as.
	FindWorkflow(ctx context.Context, ns, id string) (st workflow.Status, full string, err error)
	// RetryIn lets workflow.Retry run workflow id again only if
	// namespace ns holds every task of it.
	RetryIn(ns, id string) workflow.RetryOpt
	// WorkflowIn says whether namespace ns sees the workflow kept as id,
	// whose status is st, as FindWorkflow finds it; with st nil, whether
	// it may, by its ID alone.
	WorkflowIn(ns, id string, st *workflow.Status) bool
	// ScheduleIn returns schedule e as namespace ns shows it, and whether
	// ns sees it.
	ScheduleIn(e periodic.Entry, ns string) (periodic.Entry, bool)
}

// Console is the web console of a server.
type Console struct {
	conn      broker.Conn
	log       *slog.Logger
	lane      string
	insecure  bool
	tokens    *auth.Store
	in        *inspect.Inspector
	ctl       *control.Controller
	p         *producer.Producer
	dlq       *dlq.Reader
	schedules *periodic.Store
	api       API
	mux       *http.ServeMux
}

// Register registers the console's pages on mux, under /console/.
func Register(mux *http.ServeMux, d Deps) {
	c := &Console{conn: d.Conn, log: d.Log, lane: d.Lane, insecure: d.Insecure, tokens: d.Tokens, in: d.In, ctl: d.Ctl, p: d.P,
		dlq: d.DLQ, schedules: d.Schedules, api: d.API, mux: mux}
	c.consoleRoutes()
}

// consoleRoutes registers the console's pages.
func (c *Console) consoleRoutes() {
	// The stylesheet is all the login page needs before a token: nothing
	// else is served without one.
	c.mux.HandleFunc("GET /console/assets/style.css", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, consoleFS, "assets/style.css")
	})
	c.mux.HandleFunc("GET /console/login", c.loginPage)
	c.mux.HandleFunc("POST /console/login", c.login)
	c.mux.HandleFunc("POST /console/logout", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: cookieName, Path: "/console", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/console/login", http.StatusSeeOther)
	})
	c.console("GET /console/{$}", c.homePage)
	c.console("GET /console/q/{queue}", c.queuePage)
	c.console("GET /console/q/{queue}/task/{id}", c.taskPage)
	c.console("GET /console/q/{queue}/deadletters", c.deadLettersPage)
	c.console("GET /console/delay", c.delayPage)
	c.console("GET /console/groups", c.groupsPage)
	c.console("POST /console/q/{queue}/pause", c.consolePause(true))
	c.console("POST /console/q/{queue}/resume", c.consolePause(false))
	c.console("POST /console/q/{queue}/limit", c.consoleLimit)
	c.console("POST /console/q/{queue}/requeue", c.consoleRequeue)
	c.console("POST /console/q/{queue}/deadletters/delete", c.consoleDeleteLetters)
	c.console("POST /console/q/{queue}/task/{id}/cancel", c.consoleCancel)
	c.console("POST /console/q/{queue}/task/{id}/runnow", c.consoleRunNow)
	c.console("GET /console/workflow", c.workflowPage)
	c.console("POST /console/workflow/cancel", c.consoleWorkflowCancel)
	c.console("POST /console/workflow/retry", c.consoleWorkflowRetry)
	c.console("GET /console/periodic", c.periodicPage)
	c.console("POST /console/periodic/remove", c.consolePeriodicRemove)
}

// console registers a page or action behind the console's login: a GET
// without a valid cookie goes to the login page; an action needs a
// read-write token and a same-origin request.
func (c *Console) console(pattern string, h func(http.ResponseWriter, *http.Request, *page)) {
	post := strings.HasPrefix(pattern, "POST ")
	c.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		tok, err := c.consoleToken(r)
		if err != nil {
			if post {
				http.Error(w, "log in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/console/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		pg := &page{Token: tok, ReadOnly: tok.ReadOnly, Strip: c.stripOf(tok)}
		if !post {
			pg.Flash = takeFlash(w, r)
		}
		if q := r.PathValue("queue"); q != "" && !c.consoleSees(tok, q) {
			c.forbidden(w, pg, fmt.Sprintf("token %s opens namespace %s, not queue %s", tok.ID, tok.Namespace, q))
			return
		}
		if post {
			if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r) {
				http.Error(w, "cross-origin request refused", http.StatusForbidden)
				return
			}
			if tok.ReadOnly {
				http.Error(w, fmt.Sprintf("token %s is read-only", tok.ID), http.StatusForbidden)
				return
			}
		}
		h(w, r, pg)
	})
}

func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// consoleToken is the token of the request's cookie, or of its basic
// auth password, or, with InsecureNoAuth, an operator's.
func (c *Console) consoleToken(r *http.Request) (auth.Token, error) {
	if c.insecure {
		return auth.Token{Namespace: auth.AllNamespaces}, nil
	}
	if secret, ok := consoleSecret(r); ok {
		return c.tokens.Check(secret)
	}
	return auth.Token{}, auth.ErrNoToken
}

// consoleSecret is the token a console request carries, as its cookie or
// its basic auth password.
func consoleSecret(r *http.Request) (string, bool) {
	if c, err := r.Cookie(cookieName); err == nil {
		return c.Value, true
	}
	if _, pw, ok := r.BasicAuth(); ok {
		return pw, true
	}
	return "", false
}

// shown is a queue's name as the page's token names it (page.Strip).
func shown(strip, queue string) string { return strings.TrimPrefix(queue, strip) }

// stripOf is the page's Strip for tok.
func (c *Console) stripOf(tok auth.Token) string {
	if tok.Namespace == auth.AllNamespaces {
		return ""
	}
	if c.lane != "" {
		return c.lane + string(onceq.LaneSep) + tok.Namespace + "."
	}
	return tok.Namespace + "."
}

// consoleSees reports whether tok opens queue: a token of every namespace
// opens every queue, including those a Go producer named without one and
// lane queues; a namespace's token opens its topics <ns>.<queue> (and the
// lane queues on them).
func (c *Console) consoleSees(tok auth.Token, queue string) bool {
	if onceq.ValidateAnyQueue(queue) != nil {
		return false
	}
	if tok.Namespace == auth.AllNamespaces {
		return true
	}
	if c.lane != "" {
		if label, ok := strings.CutPrefix(queue, c.lane+string(onceq.LaneSep)); ok {
			queue = label // a namespace's queue on the server's lane
		}
	}
	ns, _, ok := strings.Cut(queue, ".")
	return ok && tok.Allows(ns)
}

// forbidden answers 403 with the console's refusal page.
func (c *Console) forbidden(w http.ResponseWriter, pg *page, why string) {
	w.WriteHeader(http.StatusForbidden)
	pg.Title, pg.Error = "Forbidden", why
	c.render(w, "error", pg)
}

func (c *Console) render(w http.ResponseWriter, name string, pg *page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	// Rendered whole before a byte goes: a page that fails halfway is
	// an error, not half a page, and a page comes in one piece.
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, pg); err != nil {
		c.log.Error("rendering a console page", "page", name, "err", err)
		http.Error(w, "the page could not be rendered: the server's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Write(buf.Bytes())
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, "login", &page{Title: "Log in", Data: consoleNext(r.URL.Query().Get("next"))})
}

// login checks the form's token: a refused one is answered 401 with the
// login page saying why (the server's words, never the query's).
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	next := consoleNext(r.FormValue("next"))
	tok := strings.TrimSpace(r.FormValue("token"))
	if _, err := c.tokens.Check(tok); err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, "login", &page{Title: "Log in", Error: err.Error(), Data: next})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/console", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int((12 * time.Hour).Seconds())})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// consoleNext returns where a login goes on: next if it is a path of the
// console, else the console's home. A path that leaves the console once
// cleaned (http.Redirect cleans it), or that a browser reads as another
// host (a backslash, "//host"), is not.
func consoleNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || strings.ContainsAny(next, "\\\x00\r\n\t") ||
		!strings.HasPrefix(path.Clean(u.Path)+"/", "/console/") || strings.HasPrefix(u.Path, "//") {
		return "/console/"
	}
	return next
}

func (c *Console) queuePage(w http.ResponseWriter, r *http.Request, pg *page) {
	queue := r.PathValue("queue")
	pg.Title = strings.TrimPrefix(queue, pg.Strip)
	if id := strings.TrimSpace(r.URL.Query().Get("id")); id != "" {
		http.Redirect(w, r, "/console/q/"+url.PathEscape(queue)+"/task/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	f := inspect.Filter{Limit: 50, After: r.URL.Query().Get("after")}
	state := r.URL.Query().Get("state")
	if state != "" && state != dueTab {
		st, err := onceq.ParseTaskState(state)
		if err != nil {
			pg.Error = err.Error()
		} else {
			f.States = []onceq.TaskState{st}
		}
	}
	st, err := c.in.Stats(r.Context(), queue)
	var tasks inspect.Page
	switch {
	case err == nil && state == dueTab:
		tasks, err = c.in.ListDue(r.Context(), queue, f)
	case err == nil:
		tasks, err = c.in.List(r.Context(), queue, f)
	}
	var done, p99 chart
	var errRate string
	if err == nil {
		recent, lerr := c.in.List(r.Context(), queue, inspect.Filter{States: []onceq.TaskState{onceq.StateSucceeded, onceq.StateDead},
			Since: time.Now().Add(-time.Hour), Limit: inspect.MaxLimit})
		err = lerr
		done, p99, errRate = charts(recent.Tasks, time.Now())
	}
	var lim control.QueueLimit
	if err == nil {
		lim, err = c.api.QueueLimit(r.Context(), queue)
	}
	if err != nil {
		pg.Error = err.Error()
	}
	pg.Data = map[string]any{"Queue": queue, "Stats": st, "Page": tasks, "State": state, "States": onceq.TaskStates, "Done": done, "P99": p99, "ErrRate": errRate, "Limit": lim,
		"Due": st.Tasks[onceq.StateScheduled] + st.Tasks[onceq.StateRetrying], "DueTab": dueTab}
	c.render(w, "queue", pg)
}

func (c *Console) taskPage(w http.ResponseWriter, r *http.Request, pg *page) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	pg.Title = id
	rec, err := c.in.Get(r.Context(), queue, id)
	data := map[string]any{"Queue": queue, "ID": id}
	if err != nil {
		if errors.Is(err, inspect.ErrNotFound) {
			w.WriteHeader(http.StatusNotFound)
		}
		pg.Error = err.Error()
	} else {
		data["Record"] = rec
		if rs, err := c.in.Attempts(r.Context(), queue, id); err == nil {
			data["Attempts"] = attemptRows(rs)
		}
		ctx, cancel := context.WithTimeout(r.Context(), findTaskWait)
		defer cancel()
		task, found, err := c.api.FindTask(ctx, queue, id, &rec)
		if err == nil && !found {
			err = errors.New("not found in its queue nor in the delay buckets (gone past their retention, or on its way between them)")
		}
		err = findTaskError(err)
		if err == nil {
			data["Task"] = task
			if w, ok := workflow.Of(&task); ok {
				data["Workflow"] = w
			}
		} else {
			data["TaskError"] = err.Error()
		}
	}
	pg.Data = data
	c.render(w, "task", pg)
}

// attemptRow is a run of a task on its page: when it started and
// ended, how long it took, and how it ended.
type attemptRow struct {
	onceq.TaskRecord
	Took string // "" when it has not both started and ended
}

// attemptRows are the rows of a task's runs (inspect.Attempts), leaving
// out a last record that is no run (the task's submission, pending or
// scheduled).
func attemptRows(rs []onceq.TaskRecord) []attemptRow {
	var out []attemptRow
	for _, r := range rs {
		if r.Attempt == 0 && r.Started.IsZero() && !r.State.Final() {
			continue
		}
		row := attemptRow{TaskRecord: r}
		if !r.Started.IsZero() && !r.Finished.IsZero() {
			row.Took = inspect.Ran(r)
		}
		out = append(out, row)
	}
	return out
}

func (c *Console) delayPage(w http.ResponseWriter, r *http.Request, pg *page) {
	pg.Title = "Delay ladder"
	p, _, err := delay.ReadLadder(r.Context(), c.conn)
	var stats []delay.BucketStats
	if err == nil {
		stats, err = delay.Stats(r.Context(), c.conn, p, delay.DefaultGroup)
	}
	if err != nil {
		pg.Error = err.Error()
	}
	horizons := make([]string, len(delay.Horizons))
	for i, h := range delay.Horizons {
		horizons[i] = h.Name
	}
	pg.Data = map[string]any{"Buckets": stats, "Horizons": horizons}
	c.render(w, "delay", pg)
}

// back redirects to the page an action came from, which shows flash, the
// server's message of what the action did (setFlash).
func back(w http.ResponseWriter, r *http.Request, to, flash string) {
	setFlash(w, r, flash)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (c *Console) consolePause(paused bool) func(http.ResponseWriter, *http.Request, *page) {
	return func(w http.ResponseWriter, r *http.Request, _ *page) {
		queue := r.PathValue("queue")
		var err error
		if paused {
			err = c.ctl.Pause(r.Context(), queue)
		} else {
			err = c.ctl.Resume(r.Context(), queue)
		}
		msg := map[bool]string{true: "paused", false: "resumed"}[paused]
		if err != nil {
			msg = err.Error()
		}
		back(w, r, "/console/q/"+url.PathEscape(queue), queue+" "+msg)
	}
}

// consoleLimit: POST /console/q/{queue}/limit: sets the queue's limit
// from the form's rate and running, or lifts it (lift).
func (c *Console) consoleLimit(w http.ResponseWriter, r *http.Request, _ *page) {
	queue := r.PathValue("queue")
	var l control.Limit
	var err error
	if r.FormValue("lift") == "" {
		l, err = c.api.ParseLimit(r.FormValue("rate"), r.FormValue("running"))
	}
	if err == nil {
		err = c.ctl.SetLimit(r.Context(), queue, l)
	}
	msg := queue + " limit: " + l.String()
	if err != nil {
		msg = err.Error()
	}
	back(w, r, "/console/q/"+url.PathEscape(queue), msg)
}

func (c *Console) consoleCancel(w http.ResponseWriter, r *http.Request, _ *page) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	to := "/console/q/" + url.PathEscape(queue) + "/task/" + url.PathEscape(id)
	if r.FormValue("from") == dueTab {
		to = "/console/q/" + url.PathEscape(queue) + "?state=" + dueTab // canceled from the list of those due
	}
	back(w, r, to, c.cancelTask(r.Context(), queue, id))
}

// findTaskWait bounds a console page's look for a task's payload in its
// queue or the delay buckets.
const findTaskWait = 3 * time.Second

// findTaskError says in words what a look for a task that ran out of
// time means; other errors are as they are.
func findTaskError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("not found within %v: its queue's backlog or the delay buckets take longer to read; reload the page to look again", findTaskWait)
	}
	return err
}

// consoleRunNow runs a task due later now: it submits a copy of it, due
// now, with its ID, key, payload and headers (runNow).
func (c *Console) consoleRunNow(w http.ResponseWriter, r *http.Request, _ *page) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	back(w, r, "/console/q/"+url.PathEscape(queue)+"/task/"+url.PathEscape(id), c.runNow(r, queue, id))
}

// runNow submits a copy, due now, of a task waiting for its due time
// (scheduled, or retrying), and says what came of it. The copy runs
// first and marks its ID processed, so that the delayed task is dropped
// as its duplicate when it comes due: a task whose ID was generated (no
// idempotency key), or due after the dedup window (the view's
// retention), is refused, since it would run twice.
func (c *Console) runNow(r *http.Request, queue, id string) string {
	ctx := r.Context()
	rec, err := c.in.Get(ctx, queue, id)
	now := time.Now()
	switch {
	case err != nil:
		return err.Error()
	case rec.State != onceq.StateScheduled && rec.State != onceq.StateRetrying || !rec.Due.After(now):
		return fmt.Sprintf("task %s is %s, not waiting for its due time: nothing to run now", id, rec.State)
	case rec.Due.After(now.Add(c.in.Retention())):
		return fmt.Sprintf("task %s is due %s, past the dedup window (%v): a copy run now would not make it a duplicate, and it would run twice",
			id, rec.Due.UTC().Format(time.RFC3339), c.in.Retention())
	}
	fctx, cancel := context.WithTimeout(ctx, findTaskWait)
	defer cancel()
	t, found, err := c.api.FindTask(fctx, queue, id, &rec)
	switch {
	case err != nil:
		return "finding the delayed task: " + findTaskError(err).Error()
	case !found:
		return "the delayed task is not in the delay buckets (moved on, or past their retention): try again"
	case t.GeneratedID:
		return fmt.Sprintf("task %s has an ID the producer generated, which is no idempotency key: a copy run now would run it twice", id)
	}
	t.Due, t.Delay = time.Time{}, 0
	if _, err := c.p.Submit(ctx, t); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("task %s runs now; its delayed copy, due %s, is dropped as its duplicate when it comes", id, rec.Due.UTC().Format(time.RFC3339))
}

// dueTab is the queue page's list of the tasks waiting for their due
// time, soonest first (inspect.ListDue), in place of a state.
const dueTab = "due"

// cancelTask cancels a task and says what came of it.
func (c *Console) cancelTask(ctx context.Context, queue, id string) string {
	a, err := c.ctl.Cancel(ctx, queue, id)
	if err != nil {
		return err.Error()
	}
	return a.Describe(queue, id)
}
