package serve

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/periodic"
	"github.com/onceq/onceq/producer"
)

// The schedules' routes (package periodic) under /periodic/{ns}.
// Schedule names are global in periodic.Topic, so a namespace's schedule
// "nightly" is stored as "<ns>.nightly", and its queue is one of the
// namespace's, <ns>.<queue>. A namespace sees the schedules whose name
// and queue both carry its prefix, and shows them without it.

// schedulesPath is the path of a namespace's schedules.
const schedulesPath = "/periodic/{ns}"

// scheduleParams are the parameters of PUT /periodic/{ns}/{name},
// named as `onceq periodic list --json` names the fields.
var scheduleParams = []string{"queue", "every", "cron", "tz", "missed", "payload", "max_attempts", "timeout"}

// scheduleFields names the fields of periodic.Schedule as the API's
// parameters.
var scheduleFields = map[string]string{"Name": "name", "Queue": "queue", "Every": "every", "Cron": "cron", "TZ": "tz",
	"Payload": "payload", "MaxAttempts": "max_attempts", "Timeout": "timeout", "Missed": "missed"}

// inNamespace returns e as namespace ns shows it, its name and queue
// without the prefix "<ns>.", and whether ns sees it: whether both carry
// the prefix.
func inNamespace(e periodic.Entry, ns string) (periodic.Entry, bool) {
	name, okName := strings.CutPrefix(e.Name, ns+".")
	q := e.Queue
	if _, label, ok := onceq.SplitLane(q); ok {
		q = label
	}
	queue, okQueue := strings.CutPrefix(q, ns+".")
	if !okName || !okQueue {
		return periodic.Entry{}, false
	}
	e.Name, e.Queue = name, queue
	return e, true
}

// scheduleName reads a schedule route's path: the schedule's name in the
// store, <ns>.<name>.
func scheduleName(r *http.Request) (string, error) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	full := ns + "." + name
	if periodic.ValidateName(name) != nil || periodic.ValidateName(full) != nil {
		return "", badRequest("name", "%.64q: want 1 to %d letters, digits, '.', '_' or '-' (the schedule is stored as <namespace>.<name>, at most %d bytes)",
			name, periodic.MaxNameLen-len(ns)-1, periodic.MaxNameLen)
	}
	return full, nil
}

// noSchedule is the answer for a schedule that namespace ns does not
// hold.
func noSchedule(r *http.Request) error {
	ns := r.PathValue("ns")
	return &apiError{status: http.StatusNotFound, field: "name",
		msg: fmt.Sprintf("no schedule %q in namespace %s: GET /periodic/%s lists them", r.PathValue("name"), ns, ns)}
}

// listSchedules: GET /periodic/{ns}: the namespace's schedules, with
// their next ticks.
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	out := []periodic.Entry{}
	for _, e := range s.schedules.List(time.Now()) {
		if e, ok := inNamespace(e, ns); ok {
			out = append(out, e)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": ns, "schedules": out})
}

// scheduleOfPath returns the schedule a route's path names, as its
// namespace shows it, and its name in the store; an error for a bad name
// or a schedule the namespace does not hold.
func (s *Server) scheduleOfPath(r *http.Request) (periodic.Entry, string, error) {
	name, err := scheduleName(r)
	if err != nil {
		return periodic.Entry{}, "", err
	}
	e, ok := s.schedules.Get(name, time.Now())
	if ok {
		e, ok = inNamespace(e, r.PathValue("ns"))
	}
	if !ok {
		return periodic.Entry{}, "", noSchedule(r)
	}
	return e, name, nil
}

// getSchedule: GET /periodic/{ns}/{name}: one schedule, with its next
// tick.
func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) {
	e, _, err := s.scheduleOfPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// putSchedule: PUT /periodic/{ns}/{name}?queue=&every=|cron=&tz=
// &missed=&payload=&max_attempts=&timeout=, the parameters in the query
// or a form body, the payload as the parameter or the body: adds the
// schedule (201) or replaces the namespace's schedule of this name (200),
// and answers it as stored, with its next tick.
func (s *Server) putSchedule(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	name, err := scheduleName(r)
	if err != nil {
		writeError(w, err)
		return
	}
	sch, err := s.scheduleOf(w, r, name)
	if err != nil {
		writeError(w, err)
		return
	}
	// The namespace's claim on the name rests on the store as it is now,
	// with a schedule added a moment ago by onceq periodic or another
	// server.
	if err := s.schedules.Sync(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	old, replaced := s.schedules.Get(name, time.Now())
	if _, ok := inNamespace(old, ns); replaced && !ok {
		writeError(w, &apiError{status: http.StatusConflict, field: "name", msg: fmt.Sprintf(
			"schedule %s exists with a queue outside namespace %s (%s): change or remove it with onceq periodic, or choose another name", name, ns, old.Queue)})
		return
	}
	stored, err := s.schedules.Add(r.Context(), sch)
	if err != nil {
		writeError(w, scheduleError(err, ns, sch.Queue))
		return
	}
	e, ok := s.schedules.Get(name, time.Now())
	if !ok { // removed meanwhile
		e = periodic.Entry{Schedule: stored}
	}
	e, _ = inNamespace(e, ns)
	status := http.StatusCreated
	if replaced {
		status = http.StatusOK
	}
	writeJSON(w, status, e)
}

// scheduleOf reads a PUT's parameters, from the query or a form body, and
// its payload, and returns the schedule named name they describe. It
// checks what a Schedule cannot hold; Store.Add validates the rest.
func (s *Server) scheduleOf(w http.ResponseWriter, r *http.Request, name string) (periodic.Schedule, error) {
	q := r.URL.Query()
	var body []byte
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/x-www-form-urlencoded" {
		r.Body = http.MaxBytesReader(w, r.Body, int64(s.cfg.maxPayload)+64<<10)
		if err := r.ParseForm(); err != nil {
			if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
				return periodic.Schedule{}, &apiError{status: http.StatusRequestEntityTooLarge, field: "body",
					msg: fmt.Sprintf("body too large: a form of at most %d bytes (the server's --max-payload-bytes and 64 KiB)", tooLarge.Limit)}
			}
			return periodic.Schedule{}, badRequest("body", "reading the form: %v", err)
		}
		if err := allowParams(r.Form, scheduleParams...); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && strings.Contains(ae.msg, "unknown parameter") {
				ae.msg += " (a body of Content-Type application/x-www-form-urlencoded, as curl -d sends, holds parameters: " +
					"send the payload with another Content-Type, or as payload=)"
			}
			return periodic.Schedule{}, err
		}
		q = r.Form
	} else {
		var err error
		if body, err = readBody(w, r, s.cfg.maxPayload, "the server's --max-payload-bytes"); err != nil {
			return periodic.Schedule{}, err
		}
	}

	sch := periodic.Schedule{Name: name, Cron: q.Get("cron"), TZ: q.Get("tz")}
	queue := q.Get("queue")
	if queue == "" {
		return periodic.Schedule{}, badRequest("queue", "missing: name the namespace's queue the ticks' tasks go to, such as queue=emails")
	}
	var err error
	if sch.Queue, err = s.queueOf(r.PathValue("ns"), queue); err != nil {
		return periodic.Schedule{}, err
	}
	if sch.Every, err = durationValue(q, "every", "an interval such as 30s, 15m or 24h"); err != nil {
		return periodic.Schedule{}, err
	}
	if sch.Timeout, err = durationValue(q, "timeout", "each tick's time-to-run, such as 90s (0: the worker's default)"); err != nil {
		return periodic.Schedule{}, err
	}
	if v := q.Get("missed"); v != "" {
		if sch.Missed, err = periodic.ParseMissed(v); err != nil {
			return periodic.Schedule{}, badRequest("missed", "%q: want catch-up (the default: submit the ticks every scheduler missed, late) or skip", v)
		}
	}
	if v := q.Get("max_attempts"); v != "" {
		if sch.MaxAttempts, err = strconv.Atoi(v); err != nil {
			return periodic.Schedule{}, badRequest("max_attempts", "%q: want 0 (the worker's default) or a whole number of runs from 1 to %d", v, onceq.MaxAttemptCount)
		}
	}
	switch p := q.Get("payload"); {
	case p != "" && len(body) > 0:
		return periodic.Schedule{}, badRequest("payload", "given as a parameter and as the body: give it once")
	case len(p) > s.cfg.maxPayload:
		return periodic.Schedule{}, &apiError{status: http.StatusRequestEntityTooLarge, field: "payload",
			msg: fmt.Sprintf("payload of %d bytes: at most %d (the server's --max-payload-bytes)", len(p), s.cfg.maxPayload)}
	case p != "":
		sch.Payload = []byte(p)
	case len(body) > 0:
		sch.Payload = body
	}
	if err := sch.Validate(); err != nil {
		return periodic.Schedule{}, scheduleError(err, r.PathValue("ns"), sch.Queue)
	}
	return sch, nil
}

// durationValue reads parameter name, whole seconds ("90") or a Go
// duration ("1m30s"); absent, 0. The schedule's validation checks its
// range.
func durationValue(q url.Values, name, want string) (time.Duration, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(seconds(v))
	if err != nil {
		return 0, badRequest(name, "%q: want seconds or a Go duration: %s", v, want)
	}
	return d, nil
}

// scheduleError turns an error of a schedule's validation or of
// Store.Add into the answer to give: each refused field named as its
// parameter.
func scheduleError(err error, ns, topic string) error {
	if oes := onceq.Options(err); len(oes) > 0 {
		msgs := make([]string, len(oes))
		for i, oe := range oes {
			msgs[i] = oe.Describe(scheduleFields[oe.Option])
		}
		return &apiError{status: http.StatusBadRequest, field: scheduleFields[oes[0].Option], msg: strings.Join(msgs, "\n")}
	}
	switch {
	case errors.Is(err, producer.ErrQueueNotFound):
		queue := queueIn(ns, topic)
		return &apiError{status: http.StatusNotFound, field: "queue", msg: fmt.Sprintf(
			"queue %s of namespace %s (topic %s) does not exist: publish to it (PUT /api/%s/%s creates it unless the server runs with --no-create-queues) or create it with onceq topics create %s",
			queue, ns, topic, ns, queue, topic)}
	case errors.Is(err, periodic.ErrInvalid):
		return &apiError{status: http.StatusBadRequest, msg: strings.TrimPrefix(err.Error(), "periodic: ")}
	}
	return err
}

// deleteSchedule: DELETE /periodic/{ns}/{name}: 204 once the store
// applied it; its ticks already submitted still run.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	if err := s.schedules.Sync(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	_, name, err := s.scheduleOfPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.schedules.Remove(r.Context(), name); errors.Is(err, periodic.ErrNotFound) {
		writeError(w, noSchedule(r))
		return
	} else if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
