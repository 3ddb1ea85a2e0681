package serve

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/dlq"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve/internal/queuelist"
	"github.com/onceq/onceq/workflow"
)

// allowParams refuses a query parameter not in names (nor token).
func allowParams(q url.Values, names ...string) error {
	return checkParams(q, names, nil)
}

// allowParams is the check of rt's query parameters: those of lmstfy's
// routes that it does not take are left out (logged at debug level).
func (s *Server) allowParams(r *http.Request, rt route) error {
	var ignore func(string) bool
	if lmstfyRoutes[rt.name] {
		ignore = func(k string) bool {
			s.cfg.log.Debug("ignoring a query parameter the endpoint does not take", "route", rt.name, "param", k)
			return true
		}
	}
	return checkParams(r.URL.Query(), rt.params, ignore)
}

// checkParams refuses a parameter given twice, and one not among names
// unless ignore (if not nil) says to leave it out.
func checkParams(q url.Values, names []string, ignore func(string) bool) error {
	for k := range q {
		if k != "token" && !slices.Contains(names, k) {
			if ignore != nil && ignore(k) {
				continue
			}
			if len(names) == 0 {
				return badRequest(k, "unknown parameter: this endpoint takes none (but token)")
			}
			return badRequest(k, "unknown parameter: this endpoint takes %s", strings.Join(names, ", "))
		}
	}
	for k, v := range q {
		if len(v) > 1 && (k == "token" || slices.Contains(names, k)) {
			return badRequest(k, "given %d times: give it once", len(v))
		}
	}
	return nil
}

// seconds turns an lmstfy duration, whole seconds such as "90", into a Go
// duration's text; a Go duration ("1m30s") is taken as it is.
func seconds(v string) string {
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return strconv.FormatUint(n, 10) + "s"
	}
	return v
}

// specOf reads a publish's parameters into a spec: id, delay, ttl,
// timeout, tries and priority.
func specOf(q url.Values) (onceq.Spec, error) {
	s := onceq.Spec{ID: q.Get("id"), Delay: seconds(q.Get("delay")), TTL: seconds(q.Get("ttl")), Timeout: seconds(q.Get("timeout"))}
	if err := checkPathID("id", s.ID); err != nil {
		return s, err
	}
	if s.TTL == "0s" {
		s.TTL = "" // lmstfy: 0 is forever
	}
	if s.Delay == "0s" {
		s.Delay = ""
	}
	if v := q.Get("tries"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTries {
			return s, badRequest("tries", "%q: want a whole number of attempts from 1 to %d", v, MaxTries)
		}
		s.MaxAttempts = n
	}
	if v := q.Get("priority"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || onceq.ValidatePriority(n) != nil {
			return s, badRequest("priority", "%q: want a whole number from %s", v, onceq.PriorityRange)
		}
		s.Priority = n
	}
	return s, nil
}

// taskError turns an error of onceq.Spec.Task or of a submission into
// the answer to give.
func taskError(err error) error {
	var e *onceq.Error
	switch {
	case errors.As(err, &e):
		return &apiError{status: http.StatusBadRequest, field: e.Field, msg: strings.TrimPrefix(e.Error(), "onceq: ")}
	case errors.Is(err, producer.ErrQueueNotFound):
		return &apiError{status: http.StatusNotFound, field: "queue", msg: "the queue does not exist and this server does not create queues (--no-create-queues): create it with onceq topics create"}
	case errors.Is(err, producer.ErrCreateQueue):
		return createFailed(err)
	case errors.Is(err, control.ErrDuplicateID):
		return &apiError{status: http.StatusBadRequest, field: "id", msg: err.Error()}
	case errors.Is(err, workflow.ErrInvalid):
		return &apiError{status: http.StatusBadRequest, msg: err.Error()}
	}
	return err
}

// createFailed answers a publish whose queue does not exist and could
// not be created (the brokers refused it, or did not answer): 503, with
// their reason. Nothing was written.
func createFailed(err error) *apiError {
	// The producer's words, without what wraps them: `queue "shop.q":
	// cannot create the queue (8 partitions): <the brokers' reason>`.
	msg := err.Error()
	if i := strings.LastIndex(msg, "producer: queue "); i >= 0 {
		msg = msg[i+len("producer: "):]
	}
	return &apiError{status: http.StatusServiceUnavailable, field: "queue",
		msg: msg + ": create it with onceq topics create, or mend what the brokers refused, then publish again"}
}

// published is the answer to a publish.
type published struct {
	Msg   string `json:"msg"`
	JobID string `json:"job_id"`
	// New is false when the ID was known: nothing was written, and State
	// is the task's.
	New     bool            `json:"new"`
	State   onceq.TaskState `json:"state,omitempty"`
	Delayed bool            `json:"delayed,omitempty"`
	// Workflow says that the job is a workflow (a bulk element with a
	// chain, group, chord or depends_on): JobID is the workflow's ID. A
	// known one has its WorkflowState, and Msg says it ("known, in state
	// failed: ...", with the way to run it again).
	Workflow      bool           `json:"workflow,omitempty"`
	WorkflowState workflow.State `json:"workflow_state,omitempty"`
}

func answer(s control.Submission) published {
	if s.New {
		return published{Msg: "published", JobID: s.ID, New: true, Delayed: s.Receipt.Delayed}
	}
	return published{Msg: "already known", JobID: s.ID, State: s.Record.State}
}

// publish: PUT /api/{ns}/{queue}?id=&delay=&ttl=&tries=&timeout=&priority=, the body
// the payload. A task with an ID (an idempotency key) is submitted only
// if its ID is unknown, with its pending record, in one transaction: 201
// if new, 200 with its state if known. Without one it takes the fast path
// (an acknowledged Submit, a generated ID): 201.
func (s *Server) publish(w http.ResponseWriter, r *http.Request) {
	topic, err := s.queueOf(r.PathValue("ns"), r.PathValue("queue"))
	if err != nil {
		writeError(w, err)
		return
	}
	spec, attrBytes, err := lmstfySpec(r)
	if err != nil {
		writeError(w, err)
		return
	}
	spec.Queue = topic
	if spec.Payload, err = readPayload(w, r, payloadLimit{s.cfg.maxPayload, attrBytes}); err != nil {
		writeError(w, err)
		return
	}
	task, err := spec.Task(time.Now(), nil)
	if err != nil {
		writeError(w, taskError(err))
		return
	}
	s.publishing(task)
	if task.ID == "" {
		rc, err := s.p.Submit(r.Context(), task)
		if err != nil {
			writeError(w, taskError(err))
			return
		}
		s.publishedTo(r.PathValue("ns"), task.Queue)
		writeJSON(w, http.StatusCreated, published{Msg: "published", JobID: rc.ID, New: true, Delayed: rc.Delayed})
		return
	}
	subs, err := s.ctl.SubmitUnique(r.Context(), s.p, task)
	if err != nil {
		writeError(w, taskError(err))
		return
	}
	if subs[0].New {
		s.publishedTo(r.PathValue("ns"), task.Queue)
	}
	status := http.StatusCreated
	if !subs[0].New {
		status = http.StatusOK
	}
	writeJSON(w, status, answer(subs[0]))
}

// bulk: POST /api/{ns}/{queue}/bulk, a JSON array of tasks written as
// onceq produce's JSON lines (queue defaults to the path's, and names a
// queue of the same namespace), submitted in one transaction, all or
// none. The answer lists each task's ID and whether it was new.
func (s *Server) bulk(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	if _, err := s.queueOf(ns, r.PathValue("queue")); err != nil {
		writeError(w, err)
		return
	}
	body, err := readBody(w, r, s.cfg.maxBulk, "the server's --max-bulk-bytes")
	if err != nil {
		writeError(w, err)
		return
	}
	var raws []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raws); err != nil || dec.More() {
		writeError(w, badRequest("body", "want a JSON array of task objects, such as [{\"payload\":\"hi\",\"delay\":\"90s\"}]"))
		return
	}
	if len(raws) == 0 {
		writeError(w, badRequest("body", "an empty array: give at least one task"))
		return
	}
	now := time.Now()
	tasks := make([]onceq.Task, len(raws))
	flows := make([]bool, len(raws))
	var nodes []workflow.Node
	for i, raw := range raws {
		var err error
		var node workflow.Node
		if flows[i], err = s.workflowLine(r, raw, now, &tasks[i], &node); err != nil || flows[i] {
			nodes = append(nodes, node)
			if err != nil {
				writeError(w, indexed(i, taskError(err)))
				return
			}
			continue
		}
		spec, err := onceq.ParseLine(raw)
		if err == nil {
			if spec.Queue == "" {
				spec.Queue = r.PathValue("queue")
			}
			if spec.Queue, err = s.queueOf(ns, spec.Queue); err == nil {
				err = checkPathID("id", spec.ID)
			}
			if err == nil {
				tasks[i], err = spec.Task(now, func(f string) string { return "[" + strconv.Itoa(i) + "]." + f })
			}
		}
		if err != nil {
			writeError(w, indexed(i, taskError(err)))
			return
		}
		// Its headers count with its payload, as a publish's attributes do.
		if hs := headerBytes(tasks[i].Headers); len(tasks[i].Payload)+hs > s.cfg.maxPayload {
			writeError(w, &apiError{status: http.StatusRequestEntityTooLarge, field: fmt.Sprintf("[%d].payload", i),
				msg: fmt.Sprintf("task %d: payload of %d bytes and headers of %d: at most %d together (the server's --max-payload-bytes)", i, len(tasks[i].Payload), hs, s.cfg.maxPayload)})
			return
		}
	}
	if err := workflow.CheckCycles(nodes...); err != nil {
		writeError(w, taskError(err))
		return
	}
	// Accepted: the workflows' queues are made (unless the server does not
	// create queues), as a publish makes its queue.
	for _, n := range nodes {
		for _, q := range workflow.Queues(n) {
			if err := s.ensureQueue(r.Context(), q); err != nil {
				writeError(w, err)
				return
			}
		}
	}
	s.publishing(tasks...)
	subs, err := s.ctl.SubmitUnique(r.Context(), s.p, tasks...)
	if err != nil {
		writeError(w, taskError(err))
		return
	}
	s.publishedMany(r.PathValue("ns"), tasks, subs)
	out := make([]published, len(subs))
	status, msg := http.StatusOK, "already known" // nothing written, as a publish of a known ID
	for i, sub := range subs {
		if sub.New {
			status, msg = http.StatusCreated, "published"
		}
		switch {
		case !flows[i]:
			out[i] = answer(sub)
		case sub.New:
			out[i] = answer(sub)
			out[i].Workflow, out[i].JobID = true, s.shownID(ns, sub.ID)
		default:
			if out[i], err = s.knownWorkflow(r, sub.ID); err != nil {
				writeError(w, err)
				return
			}
		}
	}
	writeJSON(w, status, map[string]any{"msg": msg, "jobs": out})
}

// indexed names the array element an error is about.
func indexed(i int, err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		out := *ae
		switch {
		case out.field == "":
			out.field = fmt.Sprintf("[%d]", i)
		case !strings.HasPrefix(out.field, "["):
			out.field = fmt.Sprintf("[%d].%s", i, ae.field)
		}
		out.msg = fmt.Sprintf("task %d: %s", i, ae.msg)
		return &out
	}
	return err
}

// jobOf reads a job route's path.
func (s *Server) jobOf(r *http.Request) (topic, id string, err error) {
	if topic, err = s.pathQueue(r); err != nil {
		return "", "", err
	}
	id = r.PathValue("id")
	if err := onceq.ValidateID(id); err != nil {
		return "", "", badRequest("id", "%v", err)
	}
	return topic, id, nil
}

// job is a task's record as the API shows it and, for a peek, the job as
// lmstfy's peek shows it (its data, ttl, elapsed_ms, remain_tries and
// attributes).
type job struct {
	Namespace string          `json:"namespace"`
	Queue     string          `json:"queue"`
	JobID     string          `json:"job_id"`
	Done      bool            `json:"done"`
	Task      json.RawMessage `json:"task,omitempty"`
	// Cancel and Message answer a cancel: what it did
	// (control.CancelAnswer's Outcome), in a sentence.
	Cancel  string `json:"cancel,omitempty"`
	Message string `json:"message,omitempty"`
	*lmstfyJob
}

func jobAnswer(r *http.Request, rec onceq.TaskRecord) job {
	return job{Namespace: r.PathValue("ns"), Queue: r.PathValue("queue"), JobID: rec.ID, Done: rec.State.Final(),
		Task: rec.AppendJSON(nil)}
}

// lookupError turns a query's error into its answer.
func lookupError(err error) error {
	switch {
	case errors.Is(err, inspect.ErrNotFound):
		return &apiError{status: http.StatusNotFound, field: "id", msg: "job not found: " + strings.TrimPrefix(err.Error(), "inspect: ")}
	case errors.Is(err, inspect.ErrNoQueue):
		return &apiError{status: http.StatusNotFound, field: "queue", msg: err.Error()}
	}
	return err
}

// job: GET /api/{ns}/{queue}/job/{id}: lmstfy's peek of a job, answered
// as task answers it while the job waits, is handed out, or is dead with
// its dead letter kept; 404 once it ended otherwise (succeeded, canceled,
// expired, or its dead letter deleted), as lmstfy's peek finds no job
// then. Its record stays at GET .../task/{id}.
func (s *Server) job(w http.ResponseWriter, r *http.Request) { s.peekJob(w, r, true) }

// task: GET /api/{ns}/{queue}/task/{id}: onceq's view of a task: lmstfy's
// peek of it while it waits or runs, with its record (done, task) once it
// has one, for the server's retention; 404 for a task neither waiting,
// handed out nor recorded.
func (s *Server) task(w http.ResponseWriter, r *http.Request) { s.peekJob(w, r, false) }

// peekJob answers job (lmstfy) or task.
func (s *Server) peekJob(w http.ResponseWriter, r *http.Request, lmstfy bool) {
	topic, id, err := s.jobOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), backlogWait)
	defer cancel()
	rec, recErr := s.in.Get(ctx, topic, id)
	if recErr != nil && !errors.Is(recErr, inspect.ErrNotFound) && !errors.Is(recErr, inspect.ErrNoQueue) {
		writeError(w, recErr)
		return
	}
	var known *onceq.TaskRecord
	if recErr == nil {
		known = &rec
		if lmstfy && rec.State.Final() {
			kept, err := s.deadLetterKept(ctx, topic, rec)
			if err != nil {
				writeError(w, err)
				return
			}
			if !kept {
				writeError(w, &apiError{status: http.StatusNotFound, field: "id", msg: fmt.Sprintf(
					"job %s is %s: lmstfy's peek finds no job that ended; its record is at GET .../task/%s", id, rec.State, id)})
				return
			}
		}
	}
	t, found, spent, err := s.findTask(ctx, topic, id, known)
	if err != nil {
		writeError(w, backlogError(err))
		return
	}
	if recErr != nil && !found {
		writeError(w, lookupError(recErr))
		return
	}
	if lmstfy && found && !t.Expires.IsZero() && !time.Now().Before(t.Expires) {
		// Its ttl passed: it never runs, and lmstfy's peek finds no job.
		writeError(w, &apiError{status: http.StatusNotFound, field: "id", msg: fmt.Sprintf(
			"job %s expired at %s (its ttl): lmstfy's peek finds no job that expired; its record is at GET .../task/%s", id, t.Expires.UTC().Format(time.RFC3339), id)})
		return
	}
	out := job{Namespace: r.PathValue("ns"), Queue: r.PathValue("queue"), JobID: id}
	if recErr == nil {
		out = jobAnswer(r, rec)
	}
	if found {
		j := lmstfyJobOf(r.PathValue("ns"), &t, time.Now(), spent)
		out.lmstfyJob = &j
	}
	writeJSON(w, http.StatusOK, out)
}

// deadLetterKept says whether rec is of a dead task whose dead letter is
// still in its queue's dead letters.
func (s *Server) deadLetterKept(ctx context.Context, topic string, rec onceq.TaskRecord) (bool, error) {
	if rec.State != onceq.StateDead {
		return false, nil
	}
	rs, _, err := s.dlq.Requeues(ctx, topic, []string{rec.ID}, false, time.Now())
	if errors.Is(err, dlq.ErrNoTopic) {
		return false, nil
	}
	return len(rs) > 0, err
}

// DefaultWaitTimeout is a wait's timeout when the request gives none.
const DefaultWaitTimeout = 30 * time.Second

// wait: GET /api/{ns}/{queue}/job/{id}/wait?timeout=, lmstfy's synchronous
// model: it answers once the task is final (done: true) or, at the
// timeout, with what is known of it then (done: false).
func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	topic, id, err := s.jobOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	timeout, err := durationParam(r.URL.Query(), "timeout", DefaultWaitTimeout, time.Millisecond, s.cfg.maxWait)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	rec, err := s.in.Wait(ctx, topic, id)
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		rec, err = s.in.Get(r.Context(), topic, id)
		if errors.Is(err, inspect.ErrNotFound) {
			writeJSON(w, http.StatusOK, job{Namespace: r.PathValue("ns"), Queue: r.PathValue("queue"), JobID: id})
			return
		}
	}
	if err != nil {
		writeError(w, lookupError(err))
		return
	}
	writeJSON(w, http.StatusOK, jobAnswer(r, rec))
}

// pathQueue is the queue of a queue route's path (queueOf).
func (s *Server) pathQueue(r *http.Request) (string, error) {
	return s.queueOf(r.PathValue("ns"), r.PathValue("queue"))
}

// queueStats answers a queue route's statistics, or writes its error.
func (s *Server) queueStats(w http.ResponseWriter, r *http.Request) (inspect.QueueStats, bool) {
	topic, err := s.pathQueue(r)
	var st inspect.QueueStats
	if err == nil {
		st, err = s.in.Stats(r.Context(), topic)
	}
	if err != nil {
		writeError(w, lookupError(err))
		return st, false
	}
	return st, true
}

// stats: GET /api/{ns}/{queue}/stats: inspect.QueueStats.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	if st, ok := s.queueStats(w, r); ok {
		writeJSON(w, http.StatusOK, st)
	}
}

// pause: POST /api/{ns}/{queue}/pause and /resume.
func (s *Server) pause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		topic, err := s.pathQueue(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if paused {
			err = s.ctl.Pause(r.Context(), topic)
		} else {
			err = s.ctl.Resume(r.Context(), topic)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"namespace": r.PathValue("ns"), "queue": r.PathValue("queue"), "paused": paused})
	}
}

// queues: GET /api/{ns}: the namespace's queues that have task records,
// with whether each is paused.
func (s *Server) queues(w http.ResponseWriter, r *http.Request) {
	q, err := listQuery(r.URL.Query())
	if err != nil {
		writeError(w, err)
		return
	}
	var all []string
	if s.cfg.lane != "" {
		all, err = s.queueNames(r.Context())
	} else {
		all, err = s.in.Queues(r.Context())
	}
	if err != nil {
		writeError(w, err)
		return
	}
	paused, err := s.in.Paused(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	type queue struct {
		Queue  string `json:"queue"`
		Paused bool   `json:"paused"`
	}
	ns := r.PathValue("ns")
	prefix := ns + "."
	if s.cfg.lane != "" {
		prefix = s.cfg.lane + string(onceq.LaneSep) + prefix
	}
	for _, c := range []*string{&q.After, &q.Before} {
		if *c != "" {
			*c = prefix + *c
		}
	}
	list := queuelist.List(all, func(t string) bool { return strings.HasPrefix(t, prefix) && strings.Contains(t, q.Filter) }, q)
	out := make([]queue, len(list.Queues))
	for i, t := range list.Queues {
		out[i] = queue{strings.TrimPrefix(t, prefix), paused[t]}
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": ns, "queues": out, "total": list.Total,
		"prev": strings.TrimPrefix(list.Prev, prefix), "next": strings.TrimPrefix(list.Next, prefix)})
}

// Limits of a queue listing (GET /api/{ns}, the console's home page).
const (
	// DefaultQueuePage is how many queues a page lists by default.
	DefaultQueuePage = queuelist.DefaultPage
	// MaxQueuePage bounds a page's limit.
	MaxQueuePage = queuelist.MaxPage
)

// listQuery reads a listing's parameters (queuelist.Parse): a bad one is
// a 400 naming it.
func listQuery(v url.Values) (queuelist.Query, error) {
	q, err := queuelist.Parse(v)
	var bad *queuelist.Error
	if errors.As(err, &bad) {
		return q, &apiError{status: http.StatusBadRequest, field: bad.Field, msg: bad.Error()}
	}
	return q, err
}

//go:embed openapi.json
var openAPI []byte

// serveOpenAPI: GET /api/openapi.json, the API's OpenAPI 3 document,
// checked against the routes by the tests.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

// publishing notes, before they are submitted, the queues of tasks
// about to be published: their jobs are on their way from then, and may
// be offered before the submission returns.
func (s *Server) publishing(tasks ...onceq.Task) {
	for _, t := range tasks {
		s.pull.Published(t.Queue)
	}
}

// publishedTo counts a job published to queue (its topic or lane queue)
// of namespace ns.
func (s *Server) publishedTo(ns, queue string) { s.lm.Load().publish(ns, queueIn(ns, queue)) }

// publishedMany notes the queues of the tasks of namespace ns that subs
// submitted now.
func (s *Server) publishedMany(ns string, tasks []onceq.Task, subs []control.Submission) {
	for i, sub := range subs {
		if sub.New {
			s.publishedTo(ns, tasks[i].Queue)
		}
	}
}
