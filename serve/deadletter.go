package serve

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
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
	topic, err := s.pathQueue(r)
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
	topic, err := s.pathQueue(r)
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

// respawn: PUT /api/{ns}/{queue}/deadletter?limit=&ttl=&id=, lmstfy's
// respawn: the first limit dead letters (default 1, in the order the peek
// lists them) go back to the queue in one transaction, with their tries
// reset and ttl seconds to live (default a day, 0 forever), and leave the
// dead letters. With id, the newest dead letter of id is requeued, and
// stays among the dead letters. A dead letter requeued twice runs once:
// its task keeps its ID, and the requeue (onceq-requeued) names the dead
// letter.
func (s *Server) respawn(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := limitParam(r, 1)
	if err != nil {
		writeError(w, err)
		return
	}
	ttl := DefaultJobTTL
	if v := r.URL.Query().Get("ttl"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			writeError(w, badRequest("ttl", "%q: want whole seconds, 0 for forever", v))
			return
		}
		ttl = time.Duration(n) * time.Second
	}
	now := time.Now()
	var rs []dlq.Requeue
	var done map[int32]int64 // the dead letters to delete, by partition
	if id := r.URL.Query().Get("id"); id != "" {
		var problems []error
		rs, problems, err = s.dlq.Requeues(r.Context(), topic, []string{id}, true, now)
		if err == nil && len(rs) == 0 {
			msg := "no dead letter of this ID"
			if len(problems) > 0 {
				msg = problems[0].Error()
			}
			err = &apiError{status: http.StatusNotFound, field: "id", msg: msg}
		}
	} else {
		rs, done, err = s.heads(r, topic, limit, now)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	respawned := make([]string, len(rs))
	now = time.Now() // the ttl counts from the respawn, not from the request
	for i := range rs {
		rs[i].Task.Expires = time.Time{}
		if ttl > 0 {
			rs[i].Task.Expires = now.Add(ttl)
		}
		respawned[i] = rs[i].Task.ID
	}
	if err := dlq.Write(r.Context(), s.p, rs); err != nil {
		writeError(w, err)
		return
	}
	if err := s.removeLetters(r.Context(), topic, done); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"msg": "respawned", "count": len(rs), "job_ids": respawned})
}

// heads returns the first limit dead letters of topic as requeues, and
// where each partition's of them end. A dead letter that cannot be
// requeued (malformed) ends its partition's.
func (s *Server) heads(r *http.Request, topic string, limit int, now time.Time) ([]dlq.Requeue, map[int32]int64, error) {
	letters, _, err := s.dlq.List(r.Context(), topic, limit)
	if errors.Is(err, dlq.ErrNoTopic) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var rs []dlq.Requeue
	ends := map[int32]int64{}
	stopped := map[int32]bool{}
	for _, l := range letters {
		if stopped[l.Partition] {
			continue
		}
		t, err := dlq.Incarnation(&l, topic, true, now)
		if err != nil {
			stopped[l.Partition] = true
			continue
		}
		rs = append(rs, dlq.Requeue{From: l, Task: t})
		ends[l.Partition] = l.Offset + 1
	}
	return rs, ends, nil
}

// deleteDeadLetters: DELETE /api/{ns}/{queue}/deadletter?limit=, lmstfy's:
// the first limit dead letters (default 1, in the order the peek lists
// them) are deleted: 204.
func (s *Server) deleteDeadLetters(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := limitParam(r, 1)
	if err != nil {
		writeError(w, err)
		return
	}
	letters, _, err := s.dlq.List(r.Context(), topic, limit)
	if err != nil && !errors.Is(err, dlq.ErrNoTopic) {
		writeError(w, err)
		return
	}
	ends := map[int32]int64{}
	for _, l := range letters {
		ends[l.Partition] = max(ends[l.Partition], l.Offset+1)
	}
	if err := s.removeLetters(r.Context(), topic, ends); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// removeLetters removes the dead letters of queue below ends, by
// partition: those of a lane queue by raising its floors (dlq.Remove), the
// lane's other queues' letters sharing its topic; others by deleting their
// records.
func (s *Server) removeLetters(ctx context.Context, queue string, ends map[int32]int64) error {
	if onceq.IsLaneQueue(queue) {
		return s.dlq.Remove(ctx, queue, ends)
	}
	return s.deleteRecords(ctx, broker.DLQTopic(queue), ends)
}
