package serve

import (
	"net/http"
	"strconv"

	"github.com/onceq/onceq/control"
)

// limitJSON is a queue's limit as the API answers it.
type limitJSON struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Rate      string `json:"rate,omitempty"`
	Running   int    `json:"running,omitempty"`
}

func limitOf(r *http.Request, l control.Limit) limitJSON {
	return limitJSON{Namespace: r.PathValue("ns"), Queue: r.PathValue("queue"), Rate: l.Rate(), Running: l.Running}
}

// getLimit: GET /api/{ns}/{queue}/limit.
func (s *Server) getLimit(w http.ResponseWriter, r *http.Request) {
	topic, err := s.queueOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	limits, err := s.ctl.Limits(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, limitOf(r, limits[topic]))
}

// setLimit: PUT /api/{ns}/{queue}/limit?rate=&running=: the limit given
// replaces the queue's.
func (s *Server) setLimit(w http.ResponseWriter, r *http.Request) {
	topic, err := s.queueOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	var l control.Limit
	if v := q.Get("rate"); v != "" {
		if l.Count, l.Per, err = control.ParseRate(v); err != nil {
			writeError(w, badRequest("rate", "%v", err))
			return
		}
	}
	if v := q.Get("running"); v != "" {
		if l.Running, err = strconv.Atoi(v); err != nil || l.Running < 1 {
			writeError(w, badRequest("running", "%q: want a whole number of tasks running at once, 1 or more (DELETE lifts the limit)", v))
			return
		}
	}
	if l.None() {
		writeError(w, badRequest("rate", "give rate= (10/s, 600/m), running=, or both; DELETE lifts the limit"))
		return
	}
	if err := l.Validate(); err != nil {
		writeError(w, badRequest("rate", "%v", err))
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
	topic, err := s.queueOf(r)
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
