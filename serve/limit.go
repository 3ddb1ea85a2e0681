package serve

import (
	"context"
	"net/http"
	"strconv"

	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/internal/limit"
)

// limitJSON is a queue's limit as the API answers it.
type limitJSON struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Rate      string `json:"rate,omitempty"`
	Running   int    `json:"running,omitempty"`
	// RunningNow counts the queue's tasks its limit holds running now,
	// across every worker (GET only).
	RunningNow *int `json:"running_now,omitempty"`
}

func limitOf(r *http.Request, l control.Limit) limitJSON {
	return limitJSON{Namespace: r.PathValue("ns"), Queue: r.PathValue("queue"), Rate: l.Rate(), Running: l.Running}
}

// queueLimit returns topic's limit as the limits topic holds it now, and
// its tasks running under it (handed out, for a pulled queue): the
// server's follower of the topic reads it to its end first, so that a
// limit just set is seen.
func (s *Server) queueLimit(ctx context.Context, topic string) (control.QueueLimit, error) {
	c := s.pull.Limits()
	if err := c.Sync(ctx); err != nil {
		return control.QueueLimit{}, err
	}
	return control.QueueLimit{Limit: c.Limit(topic), RunningNow: c.Running(topic)}, nil
}

// parseLimit reads a limit from its rate and running parameters (the
// API's query, the console's form): at least one, each valid.
func parseLimit(rate, running string) (control.Limit, error) {
	var l control.Limit
	var err error
	if rate != "" {
		if l.Count, l.Per, err = control.ParseRate(rate); err != nil {
			return l, badRequest("rate", "%v", err)
		}
	}
	if running != "" {
		if l.Running, err = strconv.Atoi(running); err != nil || l.Running < 1 || l.Running > limit.MaxRunning {
			return l, badRequest("running", "%q: want a whole number of tasks running at once, 1 to %d", running, limit.MaxRunning)
		}
	}
	if l.None() {
		return l, badRequest("rate", "give a rate (10/s, 600/m), a number of tasks running at once, or both")
	}
	return l, nil
}

// getLimit: GET /api/{ns}/{queue}/limit.
func (s *Server) getLimit(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	l, err := s.queueLimit(r.Context(), topic)
	if err != nil {
		writeError(w, err)
		return
	}
	out := limitOf(r, l.Limit)
	out.RunningNow = &l.RunningNow
	writeJSON(w, http.StatusOK, out)
}

// setLimit: PUT /api/{ns}/{queue}/limit?rate=&running=: the limit given
// replaces the queue's.
func (s *Server) setLimit(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	l, err := parseLimit(r.URL.Query().Get("rate"), r.URL.Query().Get("running"))
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.ctl.SetLimit(r.Context(), topic, l); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, limitOf(r, l))
}

// liftLimit: DELETE /api/{ns}/{queue}/limit.
func (s *Server) liftLimit(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.ctl.SetLimit(r.Context(), topic, control.Limit{}); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, limitOf(r, control.Limit{}))
}
