package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/workflow"
)

// lmstfy's defaults and limits, which its clients count on.
const (
	// DefaultTries is a publish's tries when it gives none, lmstfy's.
	DefaultTries = 1
	// DefaultJobTTL is a publish's ttl when it gives none, lmstfy's: a
	// task not started a day after its submission expires. ttl=0 is
	// forever.
	DefaultJobTTL = 24 * time.Hour
	// MaxTries bounds a publish's tries, lmstfy's (a uint16).
	MaxTries = 1<<16 - 1
	// MaxBulkJobs bounds the jobs of an lmstfy bulk publish, lmstfy's.
	MaxBulkJobs = 64
	// maxAttributes bounds a job's attributes, lmstfy's; longer keys and
	// values are cut as lmstfy cuts them.
	maxAttributes       = 16
	maxAttributeKeyLen  = 32
	maxAttributeValLen  = 128
	attributeHTTPPrefix = "Job-Attr-"
	// attributeHeader prefixes a job attribute in its record's headers.
	attributeHeader = "job-attr-"
)

// lmstfyJob is a job as lmstfy's consume and peek answer it, with
// onceq's attempt, priority and the consume's ttr. lmstfy's client decodes
// a job into a struct and ignores the fields it does not know.
type lmstfyJob struct {
	Msg         string            `json:"msg,omitempty"`
	Namespace   string            `json:"namespace"`
	Queue       string            `json:"queue"`
	JobID       string            `json:"job_id"`
	Data        []byte            `json:"data"`       // base64, as lmstfy's
	TTL         int64             `json:"ttl"`        // seconds left before it expires; 0: never
	ElapsedMS   int64             `json:"elapsed_ms"` // since its first submission
	RemainTries int64             `json:"remain_tries"`
	Attributes  map[string]string `json:"attributes"`
	Attempt     int               `json:"attempt,omitempty"`
	// Priority is the task's, 0 (left out) to onceq.MaxPriority:
	// onceq's, not lmstfy's.
	Priority int   `json:"priority,omitempty"`
	TTR      int64 `json:"ttr,omitempty"`
	// Lease names a consume's hold of the job, for an acknowledgment that
	// names it (lease=): onceq's, not lmstfy's.
	Lease string `json:"lease,omitempty"`
	// Input is a workflow step's input (base64), what the step before it
	// returned; Results, when that step was a group, its members' results
	// in order: onceq's, not lmstfy's.
	Input   []byte   `json:"input,omitempty"`
	Results [][]byte `json:"results,omitempty"`
}

// lmstfyJobOf describes t at now. spent says whether the attempt t is at
// has been spent (a consume without freeze_tries), as lmstfy's tries go
// down by one when a job is consumed.
func lmstfyJobOf(ns string, t *onceq.Task, now time.Time, spent bool) lmstfyJob {
	j := lmstfyJob{Namespace: ns, Queue: queueIn(ns, t.Queue), JobID: t.ID, Data: t.Payload,
		Attempt: t.Attempt, Priority: t.Priority, Attributes: attributesOf(t.Headers)}
	if j.Data == nil {
		j.Data = []byte{}
	}
	maxAttempts := t.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = consumer.DefaultMaxAttempts // the pull workers'
	}
	done := max(t.Attempt, 1) // its attempt, once it is taken
	if !spent {
		done--
	}
	j.RemainTries = int64(max(maxAttempts-done, 0))
	if !t.Enqueued.IsZero() {
		j.ElapsedMS = now.Sub(t.Enqueued).Milliseconds()
	}
	if !t.Expires.IsZero() {
		// Rounded to the nearest second, as Redis's TTL is: a job
		// published with ttl=10 and consumed at once answers 10.
		j.TTL = max(int64((t.Expires.Sub(now)+time.Second/2)/time.Second), 0)
	}
	if t.Input != nil {
		j.Input = t.Input
		j.Results, _ = workflow.Results(t.Input) // a group's output, or not
	}
	return j
}

// boolParam reads a boolean parameter (true, false, 1, 0), false when
// absent.
func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest(name, "%q: want true or false", v)
	}
	return b, nil
}

// attributesFrom reads a publish's job attributes as lmstfy does: the
// Job-Attr-<key> headers, when Enable-Job-Version is YES, keys lowered
// and cut at 32 bytes, values cut at 128; more than 16 is refused. They
// are kept as the task's job-attr-<key> headers. sent is what those
// headers took as the client sent them (names and every value), which
// counts toward the job's size (payloadLimit): a header cut to 128 bytes
// was read whole all the same.
func attributesFrom(h http.Header) (attrs []onceq.Header, sent int, err error) {
	if !strings.EqualFold(h.Get("Enable-Job-Version"), "YES") {
		return nil, 0, nil
	}
	kept := map[string]string{}
	for k, vs := range h {
		if !strings.HasPrefix(k, attributeHTTPPrefix) {
			continue
		}
		for _, v := range vs {
			sent += len(k) + len(v)
		}
		if len(vs) == 0 || vs[0] == "" {
			continue
		}
		k = strings.TrimPrefix(k, attributeHTTPPrefix)
		k = lowerASCII(k[:min(len(k), maxAttributeKeyLen)])
		kept[k] = vs[0][:min(len(vs[0]), maxAttributeValLen)]
	}
	if len(kept) > maxAttributes {
		return nil, sent, badRequest("Job-Attr", "%d attributes: at most %d", len(kept), maxAttributes)
	}
	for k, v := range kept {
		attrs = append(attrs, onceq.Header{Key: attributeHeader + k, Value: []byte(v)})
	}
	return attrs, sent, nil
}

// lowerASCII lowers the ASCII letters of s and keeps its other bytes:
// strings.ToLower would turn bytes that are not UTF-8 into U+FFFD, three
// bytes each, past the key's limit. (net/http admits only ASCII tokens
// as header names; a caller of attributesFrom may pass others.)
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// attributesOf returns the job attributes among a task's headers, nil
// when it has none (lmstfy answers null).
func attributesOf(hs []onceq.Header) map[string]string {
	var attrs map[string]string
	for _, h := range hs {
		if k, ok := strings.CutPrefix(h.Key, attributeHeader); ok {
			if attrs == nil {
				attrs = map[string]string{}
			}
			attrs[k] = string(h.Value)
		}
	}
	return attrs
}

// lmstfySpec reads lmstfy's publish parameters (delay, ttl, tries, and
// onceq's id, timeout and priority) with lmstfy's defaults: 1 try, a ttl
// of a day; and the job's attributes, with what their headers took as
// sent (attributesFrom).
func lmstfySpec(r *http.Request) (s onceq.Spec, attrBytes int, err error) {
	q := r.URL.Query()
	if s, err = specOf(q); err != nil {
		return s, 0, err
	}
	if q.Get("tries") == "" {
		s.MaxAttempts = DefaultTries
	}
	if !q.Has("ttl") {
		s.TTL = DefaultJobTTL.String()
	}
	if s.TTL != "" && s.Delay != "" {
		ttl, err1 := time.ParseDuration(s.TTL)
		delay, err2 := time.ParseDuration(s.Delay)
		if err1 == nil && err2 == nil && ttl < delay {
			return s, 0, badRequest("ttl", "%v is shorter than the delay %v: the job would expire before it is due (ttl=0 is forever)", ttl, delay)
		}
	}
	s.Headers, attrBytes, err = attributesFrom(r.Header)
	return s, attrBytes, err
}

// bulkLmstfy: PUT /api/{ns}/{queue}/bulk?delay=&ttl=&tries=&priority=, lmstfy's
// bulk publish: the body is a JSON array of at most 64 values, each the
// payload of one job (its JSON text), all with the query's parameters and
// the request's attributes, submitted in one transaction. 201
// {"msg":"published","job_ids":[...]}.
func (s *Server) bulkLmstfy(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	spec, attrBytes, err := lmstfySpec(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if spec.ID != "" {
		writeError(w, badRequest("id", "a bulk publish's jobs get IDs of their own: publish one job to give an ID"))
		return
	}
	lim := payloadLimit{s.cfg.maxPayload, attrBytes}
	if err := lim.check(); err != nil {
		writeError(w, err)
		return
	}
	body, err := readBody(w, r, s.cfg.maxBulk, "the server's --max-bulk-bytes")
	if err != nil {
		writeError(w, err)
		return
	}
	spec.Queue = topic
	tasks, err := lmstfyBulk(body, spec, lim, time.Now())
	if err != nil {
		writeError(w, err)
		return
	}
	s.publishing(tasks...)
	subs, err := s.ctl.SubmitUnique(r.Context(), s.p, tasks...)
	if err != nil {
		writeError(w, taskError(err))
		return
	}
	s.publishedMany(r.PathValue("ns"), tasks, subs)
	ids := make([]string, len(subs))
	for i, sub := range subs {
		ids[i] = sub.ID
	}
	writeJSON(w, http.StatusCreated, map[string]any{"msg": "published", "job_ids": ids})
}

// lmstfyBulk reads the body of an lmstfy bulk publish: a JSON array of
// 1 to MaxBulkJobs values, each the payload of one job of spec (its JSON
// text, within lim). Its errors are the answers to give.
func lmstfyBulk(body []byte, spec onceq.Spec, lim payloadLimit, now time.Time) ([]onceq.Task, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return nil, badRequest("body", "want a JSON array of jobs, each its payload, such as [{\"order\":1},\"text\"]")
	}
	switch {
	case len(raws) == 0:
		return nil, badRequest("body", "an empty array: give at least one job")
	case len(raws) > MaxBulkJobs:
		return nil, badRequest("body", "%d jobs: at most %d in one bulk publish", len(raws), MaxBulkJobs)
	}
	tasks := make([]onceq.Task, len(raws))
	for i, raw := range raws {
		if len(raw) > lim.bytes() {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, field: "[" + strconv.Itoa(i) + "]",
				msg: fmt.Sprintf("job %d: %d bytes: at most %d (%s)", i, len(raw), lim.bytes(), lim)}
		}
		one := spec
		one.Payload = bytes.Clone(raw)
		var err error
		if tasks[i], err = one.Task(now, nil); err != nil {
			return nil, indexed(i, taskError(err))
		}
	}
	return tasks, nil
}

// republish: PUT /api/{ns}/{queue}/job/{id}?delay=&ttl=&tries=&priority=, lmstfy's
// republish: the job is acknowledged (or, not handed out, canceled) and
// the body published as a new job, with an ID of its own: 201.
func (s *Server) republish(w http.ResponseWriter, r *http.Request) {
	topic, id, err := s.jobOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	spec, attrBytes, err := lmstfySpec(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if spec.ID != "" {
		writeError(w, badRequest("id", "a republished job gets an ID of its own: leave id out"))
		return
	}
	spec.Queue = topic
	if spec.Payload, err = readPayload(w, r, payloadLimit{s.cfg.maxPayload, attrBytes}); err != nil {
		writeError(w, err)
		return
	}
	if _, err := spec.Task(time.Now(), nil); err != nil { // checked before the old job is finished
		writeError(w, taskError(err))
		return
	}
	if _, err := s.finish(r, topic, id, "", nil); err != nil {
		writeError(w, err)
		return
	}
	// The ttl counts from the publish, not from the request: finishing
	// the old job is a transaction and can take seconds on a busy broker.
	task, err := spec.Task(time.Now(), nil)
	if err != nil {
		writeError(w, taskError(err))
		return
	}
	s.publishing(task)
	rc, err := s.p.Submit(r.Context(), task)
	if err != nil {
		writeError(w, taskError(err))
		return
	}
	s.publishedTo(r.PathValue("ns"), task.Queue)
	writeJSON(w, http.StatusCreated, published{Msg: "published", JobID: rc.ID, New: true, Delayed: rc.Delayed})
}
