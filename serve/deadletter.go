package serve

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/onceq/onceq/dlq"
)

// Dead letters, lmstfy's endpoints over package dlq. A queue's dead
// letters are its topic onceq-dlq-<ns>.<queue>.

// MaxDeadLetters bounds the dead letters one request lists or respawns.
const MaxDeadLetters = 1000

// limitParam reads the limit parameter: def when absent, 1 to
// MaxDeadLetters.
func limitParam(r *http.Request, def int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxDeadLetters {
		return 0, badRequest("limit", "%q: want a number of dead letters from 1 to %d", v, MaxDeadLetters)
	}
	return n, nil
}

// deadLetters: GET /api/{ns}/{queue}/deadletter?limit=: lmstfy's peek
// (deadletter_size, deadletter_head), and the first limit dead letters
// (default 10) with their errors.
func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) {
	topic, err := queueOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := limitParam(r, 10)
	if err != nil {
		writeError(w, err)
		return
	}
	letters, total, err := s.dlq.List(r.Context(), topic, limit)
	if errors.Is(err, dlq.ErrNoTopic) {
		letters, total, err = nil, 0, nil
	}
	if err != nil {
		writeError(w, err)
		return
	}
	head := ""
	if len(letters) > 0 {
		head = letters[0].Task.ID
	}
	if letters == nil {
		letters = []dlq.Letter{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": r.PathValue("ns"), "queue": r.PathValue("queue"),
		"deadletter_size": total, "deadletter_head": head, "letters": letters})
}

// deadLetterSize: GET /api/{ns}/{queue}/deadletter/size.
func (s *Server) deadLetterSize(w http.ResponseWriter, r *http.Request) {
	topic, err := queueOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	n := 0
	err = s.dlq.Read(r.Context(), topic, func(dlq.Letter) error { n++; return nil })
	if err != nil && !errors.Is(err, dlq.ErrNoTopic) {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": r.PathValue("ns"), "queue": r.PathValue("queue"), "size": n})
}

// respawn: PUT /api/{ns}/{queue}/deadletter?limit=&id=: requeues the
// newest dead letter of id, or of the first limit IDs (default 1), in one
// transaction, with their attempts reset (lmstfy gives a respawned job
// its tries again). A dead letter requeued twice runs once: its task
// keeps its ID, and the requeue (onceq-requeued) names the dead letter.
func (s *Server) respawn(w http.ResponseWriter, r *http.Request) {
	topic, err := queueOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := limitParam(r, 1)
	if err != nil {
		writeError(w, err)
		return
	}
	var ids []string
	if id := r.URL.Query().Get("id"); id != "" {
		ids = []string{id}
	}
	rs, problems, err := s.dlq.Requeues(r.Context(), topic, ids, true, time.Now())
	if errors.Is(err, dlq.ErrNoTopic) {
		rs, err = nil, nil
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if len(ids) > 0 && len(rs) == 0 {
		msg := "no dead letter of this ID"
		if len(problems) > 0 {
			msg = problems[0].Error()
		}
		writeError(w, &apiError{status: http.StatusNotFound, field: "id", msg: msg})
		return
	}
	if len(rs) > limit {
		rs = rs[:limit]
	}
	if err := dlq.Write(r.Context(), s.p, rs); err != nil {
		writeError(w, err)
		return
	}
	respawned := make([]string, len(rs))
	for i := range rs {
		respawned[i] = rs[i].Task.ID
	}
	writeJSON(w, http.StatusOK, map[string]any{"msg": "respawned", "count": len(rs), "job_ids": respawned})
}
