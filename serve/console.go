package serve

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/workflow"
)

// The web console: server-rendered pages, every asset embedded, behind
// the same tokens as the API. A login keeps the token in an HttpOnly,
// SameSite=Strict cookie of /console; actions are POST forms; a read-only
// token sees the pages without their buttons and is refused the actions.

//go:embed console
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
}).ParseFS(consoleFS, "console/*.html"))

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

// consoleRoutes registers the console's pages.
func (s *Server) consoleRoutes() {
	// The stylesheet is all the login page needs before a token: nothing
	// else is served without one.
	s.mux.HandleFunc("GET /console/assets/style.css", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, consoleFS, "console/style.css")
	})
	s.mux.HandleFunc("GET /console/login", s.loginPage)
	s.mux.HandleFunc("POST /console/login", s.login)
	s.mux.HandleFunc("POST /console/logout", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: cookieName, Path: "/console", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/console/login", http.StatusSeeOther)
	})
	s.console("GET /console/{$}", s.homePage)
	s.console("GET /console/q/{queue}", s.queuePage)
	s.console("GET /console/q/{queue}/task/{id}", s.taskPage)
	s.console("GET /console/q/{queue}/deadletters", s.deadLettersPage)
	s.console("GET /console/delay", s.delayPage)
	s.console("GET /console/groups", s.groupsPage)
	s.console("POST /console/q/{queue}/pause", s.consolePause(true))
	s.console("POST /console/q/{queue}/resume", s.consolePause(false))
	s.console("POST /console/q/{queue}/limit", s.consoleLimit)
	s.console("POST /console/q/{queue}/requeue", s.consoleRequeue)
	s.console("POST /console/q/{queue}/deadletters/delete", s.consoleDeleteLetters)
	s.console("POST /console/q/{queue}/task/{id}/cancel", s.consoleCancel)
	s.console("POST /console/q/{queue}/task/{id}/runnow", s.consoleRunNow)
	s.console("GET /console/workflow", s.workflowPage)
	s.console("POST /console/workflow/cancel", s.consoleWorkflowCancel)
	s.console("POST /console/workflow/retry", s.consoleWorkflowRetry)
	s.console("GET /console/periodic", s.periodicPage)
	s.console("POST /console/periodic/remove", s.consolePeriodicRemove)
}

// console registers a page or action behind the console's login: a GET
// without a valid cookie goes to the login page; an action needs a
// read-write token and a same-origin request.
func (s *Server) console(pattern string, h func(http.ResponseWriter, *http.Request, *page)) {
	post := strings.HasPrefix(pattern, "POST ")
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		tok, err := s.consoleToken(r)
		if err != nil {
			if post {
				http.Error(w, "log in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/console/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		pg := &page{Token: tok, ReadOnly: tok.ReadOnly, Strip: s.stripOf(tok)}
		if !post {
			pg.Flash = takeFlash(w, r)
		}
		if q := r.PathValue("queue"); q != "" && !s.consoleSees(tok, q) {
			s.forbidden(w, pg, fmt.Sprintf("token %s opens namespace %s, not queue %s", tok.ID, tok.Namespace, q))
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
func (s *Server) consoleToken(r *http.Request) (auth.Token, error) {
	if s.cfg.insecure {
		return auth.Token{Namespace: auth.AllNamespaces}, nil
	}
	if secret, ok := consoleSecret(r); ok {
		return s.tokens.Check(secret)
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
func (s *Server) stripOf(tok auth.Token) string {
	if tok.Namespace == auth.AllNamespaces {
		return ""
	}
	if s.cfg.lane != "" {
		return s.cfg.lane + string(onceq.LaneSep) + tok.Namespace + "."
	}
	return tok.Namespace + "."
}

// consoleSees reports whether tok opens queue: a token of every namespace
// opens every queue, including those a Go producer named without one and
// lane queues; a namespace's token opens its topics <ns>.<queue> (and the
// lane queues on them).
func (s *Server) consoleSees(tok auth.Token, queue string) bool {
	if onceq.ValidateAnyQueue(queue) != nil {
		return false
	}
	if tok.Namespace == auth.AllNamespaces {
		return true
	}
	if s.cfg.lane != "" {
		if label, ok := strings.CutPrefix(queue, s.cfg.lane+string(onceq.LaneSep)); ok {
			queue = label // a namespace's queue on the server's lane
		}
	}
	ns, _, ok := strings.Cut(queue, ".")
	return ok && tok.Allows(ns)
}

// forbidden answers 403 with the console's refusal page.
func (s *Server) forbidden(w http.ResponseWriter, pg *page, why string) {
	w.WriteHeader(http.StatusForbidden)
	pg.Title, pg.Error = "Forbidden", why
	s.render(w, "error", pg)
}

func (s *Server) render(w http.ResponseWriter, name string, pg *page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'")
	// Rendered whole before a byte goes: a page that fails halfway is
	// an error, not half a page, and a page comes in one piece.
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, pg); err != nil {
		s.cfg.log.Error("rendering a console page", "page", name, "err", err)
		http.Error(w, "the page could not be rendered: the server's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.Write(buf.Bytes())
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, "login", &page{Title: "Log in", Data: consoleNext(r.URL.Query().Get("next"))})
}

// login checks the form's token: a refused one is answered 401 with the
// login page saying why (the server's words, never the query's).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	next := consoleNext(r.FormValue("next"))
	tok := strings.TrimSpace(r.FormValue("token"))
	if _, err := s.tokens.Check(tok); err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		s.render(w, "login", &page{Title: "Log in", Error: err.Error(), Data: next})
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

func (s *Server) queuePage(w http.ResponseWriter, r *http.Request, pg *page) {
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
	st, err := s.in.Stats(r.Context(), queue)
	var tasks inspect.Page
	switch {
	case err == nil && state == dueTab:
		tasks, err = s.in.ListDue(r.Context(), queue, f)
	case err == nil:
		tasks, err = s.in.List(r.Context(), queue, f)
	}
	var done, p99 chart
	var errRate string
	if err == nil {
		recent, lerr := s.in.List(r.Context(), queue, inspect.Filter{States: []onceq.TaskState{onceq.StateSucceeded, onceq.StateDead},
			Since: time.Now().Add(-time.Hour), Limit: inspect.MaxLimit})
		err = lerr
		done, p99, errRate = charts(recent.Tasks, time.Now())
	}
	var lim control.QueueLimit
	if err == nil {
		lim, err = s.queueLimit(r.Context(), queue)
	}
	if err != nil {
		pg.Error = err.Error()
	}
	pg.Data = map[string]any{"Queue": queue, "Stats": st, "Page": tasks, "State": state, "States": onceq.TaskStates, "Done": done, "P99": p99, "ErrRate": errRate, "Limit": lim,
		"Due": st.Tasks[onceq.StateScheduled] + st.Tasks[onceq.StateRetrying], "DueTab": dueTab}
	s.render(w, "queue", pg)
}

func (s *Server) taskPage(w http.ResponseWriter, r *http.Request, pg *page) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	pg.Title = id
	rec, err := s.in.Get(r.Context(), queue, id)
	data := map[string]any{"Queue": queue, "ID": id}
	if err != nil {
		if errors.Is(err, inspect.ErrNotFound) {
			w.WriteHeader(http.StatusNotFound)
		}
		pg.Error = err.Error()
	} else {
		data["Record"] = rec
		if rs, err := s.in.Attempts(r.Context(), queue, id); err == nil {
			data["Attempts"] = attemptRows(rs)
		}
		ctx, cancel := context.WithTimeout(r.Context(), findTaskWait)
		defer cancel()
		task, found, _, err := s.findTask(ctx, queue, id, &rec)
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
	s.render(w, "task", pg)
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

// errTaskGone says that a task's queue record was deleted.
var errTaskGone = errors.New("the task's record is gone from the queue (past its retention, or its backlog destroyed)")

// taskAt reads the task at a queue's partition and offset: its payload and
// headers, which the task's record does not keep.
func (s *Server) taskAt(ctx context.Context, queue string, partition int32, offset int64) (onceq.Task, error) {
	topic := onceq.QueueTopic(queue)
	cl, err := s.cfg.conn.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return onceq.Task{}, err
	}
	defer cl.Close()
	// A record deleted (past the queue's retention, or its backlog
	// destroyed) is below the partition's start: a fetch would wait for
	// records that never come.
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err != nil {
		return onceq.Task{}, err
	}
	if o, ok := starts.Lookup(topic, partition); ok && o.Err == nil && o.Offset > offset {
		return onceq.Task{}, errTaskGone
	}
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for _, rec := range fs.Records() {
			if rec.Offset == offset {
				return onceq.FromRecord(rec)
			}
			if rec.Offset > offset {
				return onceq.Task{}, errTaskGone
			}
		}
	}
	return onceq.Task{}, errors.New("the task's record could not be read in time")
}

func (s *Server) delayPage(w http.ResponseWriter, r *http.Request, pg *page) {
	pg.Title = "Delay ladder"
	p, _, err := delay.ReadLadder(r.Context(), s.cfg.conn)
	var stats []delay.BucketStats
	if err == nil {
		stats, err = delay.Stats(r.Context(), s.cfg.conn, p, delay.DefaultGroup)
	}
	if err != nil {
		pg.Error = err.Error()
	}
	horizons := make([]string, len(delay.Horizons))
	for i, h := range delay.Horizons {
		horizons[i] = h.Name
	}
	pg.Data = map[string]any{"Buckets": stats, "Horizons": horizons}
	s.render(w, "delay", pg)
}

// back redirects to the page an action came from, which shows flash, the
// server's message of what the action did (setFlash).
func back(w http.ResponseWriter, r *http.Request, to, flash string) {
	setFlash(w, r, flash)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (s *Server) consolePause(paused bool) func(http.ResponseWriter, *http.Request, *page) {
	return func(w http.ResponseWriter, r *http.Request, _ *page) {
		queue := r.PathValue("queue")
		var err error
		if paused {
			err = s.ctl.Pause(r.Context(), queue)
		} else {
			err = s.ctl.Resume(r.Context(), queue)
		}
		msg := map[bool]string{true: "paused", false: "resumed"}[paused]
		if err != nil {
			msg = err.Error()
		}
		back(w, r, "/console/q/"+url.PathEscape(queue), queue+" "+msg)
	}
}

func (s *Server) consoleCancel(w http.ResponseWriter, r *http.Request, _ *page) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	to := "/console/q/" + url.PathEscape(queue) + "/task/" + url.PathEscape(id)
	if r.FormValue("from") == dueTab {
		to = "/console/q/" + url.PathEscape(queue) + "?state=" + dueTab // canceled from the list of those due
	}
	back(w, r, to, s.cancelTask(r.Context(), queue, id))
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
func (s *Server) consoleRunNow(w http.ResponseWriter, r *http.Request, _ *page) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	back(w, r, "/console/q/"+url.PathEscape(queue)+"/task/"+url.PathEscape(id), s.runNow(r, queue, id))
}

// runNow submits a copy, due now, of a task waiting for its due time
// (scheduled, or retrying), and says what came of it. The copy runs
// first and marks its ID processed, so that the delayed task is dropped
// as its duplicate when it comes due: a task whose ID was generated (no
// idempotency key), or due after the dedup window (the view's
// retention), is refused, since it would run twice.
func (s *Server) runNow(r *http.Request, queue, id string) string {
	ctx := r.Context()
	rec, err := s.in.Get(ctx, queue, id)
	now := time.Now()
	switch {
	case err != nil:
		return err.Error()
	case rec.State != onceq.StateScheduled && rec.State != onceq.StateRetrying || !rec.Due.After(now):
		return fmt.Sprintf("task %s is %s, not waiting for its due time: nothing to run now", id, rec.State)
	case rec.Due.After(now.Add(s.in.Retention())):
		return fmt.Sprintf("task %s is due %s, past the dedup window (%v): a copy run now would not make it a duplicate, and it would run twice",
			id, rec.Due.UTC().Format(time.RFC3339), s.in.Retention())
	}
	fctx, cancel := context.WithTimeout(ctx, findTaskWait)
	defer cancel()
	t, found, _, err := s.findTask(fctx, queue, id, &rec)
	switch {
	case err != nil:
		return "finding the delayed task: " + findTaskError(err).Error()
	case !found:
		return "the delayed task is not in the delay buckets (moved on, or past their retention): try again"
	case t.GeneratedID:
		return fmt.Sprintf("task %s has an ID the producer generated, which is no idempotency key: a copy run now would run it twice", id)
	}
	t.Due, t.Delay = time.Time{}, 0
	if _, err := s.p.Submit(ctx, t); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("task %s runs now; its delayed copy, due %s, is dropped as its duplicate when it comes", id, rec.Due.UTC().Format(time.RFC3339))
}

// dueTab is the queue page's list of the tasks waiting for their due
// time, soonest first (inspect.ListDue), in place of a state.
const dueTab = "due"

// cancelTask cancels a task and says what came of it.
func (s *Server) cancelTask(ctx context.Context, queue, id string) string {
	a, err := s.ctl.Cancel(ctx, queue, id)
	if err != nil {
		return err.Error()
	}
	return a.Describe(queue, id)
}

// groupView is a consumer group on the groups page: its partitions of
// the token's queues, with their lag and the member consuming each.
type groupView struct {
	Group, State string
	Members      int
	Partitions   []partitionLag
	Lag          int64 // in tasks, over its partitions
	Exact        bool
}

type partitionLag struct {
	Topic          string
	Partition      int32
	Committed, End int64
	Lag            int64 // in offsets
	// Tasks counts the tasks past the committed offset: the lag without
	// transaction markers and aborted records; Exact is false when it
	// is estimated from the first ones read.
	Tasks  int64
	Exact  bool
	Member string
}

// countLag counts the tasks past each group's committed offsets (all of a
// partition's tasks for a group that committed none), as queue stats do:
// the partitions of every group are read once, up to delay's sampling
// bounds, so that a page of many groups costs what one does.
func countLag(ctx context.Context, conn broker.Conn, groups []groupView) error {
	var spans []*broker.Span
	for i := range groups {
		for j := range groups[i].Partitions {
			pl := &groups[i].Partitions[j]
			spans = append(spans, &broker.Span{Topic: pl.Topic, Partition: pl.Partition, From: pl.End - max(pl.Lag, 0), End: pl.End})
		}
	}
	if err := broker.CountRecords(ctx, conn, spans, delay.StatsSampleOffsets, delay.StatsSampleBytes, lagCountTimeout); err != nil {
		return fmt.Errorf("counting the tasks past the groups' offsets: %w", err)
	}
	k := 0
	for i := range groups {
		g := &groups[i]
		g.Exact = true
		for j := range g.Partitions {
			pl := &g.Partitions[j]
			pl.Tasks, pl.Exact = spans[k].Counted()
			k++
			g.Lag += pl.Tasks
			g.Exact = g.Exact && pl.Exact
		}
	}
	return nil
}

// lagCountTimeout bounds the groups page's reading of the partitions;
// those not read by then are estimated.
const lagCountTimeout = 5 * time.Second

func (s *Server) groupsPage(w http.ResponseWriter, r *http.Request, pg *page) {
	pg.Title = "Groups"
	var groups []groupView
	err := func() error {
		adm, err := broker.NewAdmin(s.cfg.conn)
		if err != nil {
			return err
		}
		defer adm.Close()
		listed, err := adm.Kadm().ListGroups(r.Context())
		if err != nil {
			return err
		}
		lags, err := adm.Kadm().Lag(r.Context(), listed.Groups()...)
		if err != nil {
			return err
		}
		for _, gl := range lags.Sorted() {
			g := groupView{Group: gl.Group, State: gl.State, Members: len(gl.Members)}
			for _, topic := range slices.Sorted(maps.Keys(gl.Lag)) {
				if !s.consoleSees(pg.Token, topic) {
					continue
				}
				for _, p := range slices.Sorted(maps.Keys(gl.Lag[topic])) {
					l := gl.Lag[topic][p]
					pl := partitionLag{Topic: topic, Partition: p, Committed: l.Commit.At, End: l.End.Offset, Lag: l.Lag}
					if l.Member != nil {
						pl.Member = l.Member.ClientID + " " + l.Member.ClientHost
						if l.Member.InstanceID != nil {
							pl.Member = *l.Member.InstanceID + " " + l.Member.ClientHost
						}
					}
					g.Partitions = append(g.Partitions, pl)
				}
			}
			if len(g.Partitions) > 0 {
				groups = append(groups, g)
			}
		}
		return countLag(r.Context(), s.cfg.conn, groups)
	}()
	if err != nil {
		pg.Error = err.Error()
	}
	pg.Data = groups
	s.render(w, "groups", pg)
}
