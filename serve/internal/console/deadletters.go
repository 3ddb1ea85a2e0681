package console

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dlq"
)

// The console's dead letters: a queue's newest, requeued one by one or
// all at once, and deleted.

func (c *Console) deadLettersPage(w http.ResponseWriter, r *http.Request, pg *page) {
	queue := r.PathValue("queue")
	pg.Title = "Dead letters of " + strings.TrimPrefix(queue, pg.Strip)
	letters, total, err := c.newestLetters(r.Context(), queue, deadLettersShown)
	if err != nil && !errors.Is(err, dlq.ErrNoTopic) {
		pg.Error = err.Error()
	}
	pg.Data = map[string]any{"Queue": queue, "Letters": letters, "Total": total}
	c.render(w, "deadletters", pg)
}

// deadLettersShown is the most dead letters the page lists.
const deadLettersShown = 100

// newestLetters reads a queue's dead letters and returns the n newest
// (by when they failed, then by their place in their topic), newest
// first, and how many there are: the heap it keeps while it reads holds
// n of them at most, whatever the topic's size.
func (c *Console) newestLetters(ctx context.Context, queue string, n int) ([]dlq.Letter, int, error) {
	older := func(a, b *dlq.Letter) bool {
		if !a.Failed.Equal(b.Failed) {
			return a.Failed.Before(b.Failed)
		}
		return a.Partition < b.Partition || a.Partition == b.Partition && a.Offset < b.Offset
	}
	h := &letterHeap{older: older}
	total := 0
	err := c.dlq.Read(ctx, queue, func(l dlq.Letter) error {
		total++
		if h.Len() < n {
			heap.Push(h, l)
		} else if older(&h.ls[0], &l) {
			h.ls[0] = l
			heap.Fix(h, 0)
		}
		return nil
	})
	out := h.ls
	slices.SortFunc(out, func(a, b dlq.Letter) int {
		if older(&b, &a) {
			return -1
		}
		return 1
	})
	return out, total, err
}

// letterHeap keeps the oldest of its dead letters on top.
type letterHeap struct {
	ls    []dlq.Letter
	older func(a, b *dlq.Letter) bool
}

func (h *letterHeap) Len() int           { return len(h.ls) }
func (h *letterHeap) Less(i, j int) bool { return h.older(&h.ls[i], &h.ls[j]) }
func (h *letterHeap) Swap(i, j int)      { h.ls[i], h.ls[j] = h.ls[j], h.ls[i] }
func (h *letterHeap) Push(x any)         { h.ls = append(h.ls, x.(dlq.Letter)) }
func (h *letterHeap) Pop() any {
	l := h.ls[len(h.ls)-1]
	h.ls = h.ls[:len(h.ls)-1]
	return l
}

// consoleRequeue requeues the newest dead letter of a task (id), or of
// every task (all=1), starting them over at attempt 1 when reset=1;
// requeueing twice writes a task once (dlq.Write). It goes back to the
// dead letters, or to the task's page (from=task).
func (c *Console) consoleRequeue(w http.ResponseWriter, r *http.Request, _ *page) {
	queue, id, all := r.PathValue("queue"), r.FormValue("id"), r.FormValue("all") == "1"
	to := "/console/q/" + url.PathEscape(queue) + "/deadletters"
	if r.FormValue("from") == "task" && !all {
		to = "/console/q/" + url.PathEscape(queue) + "/task/" + url.PathEscape(id) // requeued from its page
	}
	var ids []string
	if !all {
		ids = []string{id}
	}
	rs, problems, err := c.dlq.Requeues(r.Context(), queue, ids, r.FormValue("reset") == "1", time.Now())
	switch {
	case err != nil:
		back(w, r, to, err.Error())
	case len(rs) == 0 && len(problems) > 0:
		back(w, r, to, problems[0].Error())
	case len(rs) == 0 && all:
		back(w, r, to, "no dead letter to requeue")
	case len(rs) == 0:
		back(w, r, to, "no dead letter of "+id)
	default:
		if !all {
			rs = rs[:1]
		}
		if err := dlq.Write(r.Context(), c.p, rs); err != nil {
			back(w, r, to, err.Error())
			return
		}
		msg := "requeued " + id
		if all {
			msg = fmt.Sprintf("requeued %d dead letters", len(rs))
			if len(problems) > 0 {
				msg += fmt.Sprintf("; %d left out: %v", len(problems), problems[0])
			}
		}
		back(w, r, to, msg)
	}
}

// consoleDeleteLetters deletes a queue's dead letters, every one there
// when asked (the dead-letter topic's end offsets then), once its form's
// box confirms it: they cannot be requeued afterwards. A lane queue's go
// by raising its floors, the lane's other queues' staying (removeLetters).
func (c *Console) consoleDeleteLetters(w http.ResponseWriter, r *http.Request, pg *page) {
	queue := r.PathValue("queue")
	to := "/console/q/" + url.PathEscape(queue) + "/deadletters"
	if r.FormValue("confirm") != "1" {
		back(w, r, to, "nothing deleted: tick the box to confirm, as dead letters deleted cannot be requeued")
		return
	}
	adm, err := broker.NewAdmin(c.conn)
	if err != nil {
		back(w, r, to, err.Error())
		return
	}
	defer adm.Close()
	listed, err := adm.Kadm().ListEndOffsets(r.Context(), broker.DLQTopic(queue))
	if err == nil {
		err = listed.Error()
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	if err == nil {
		err = c.api.RemoveLetters(r.Context(), queue, ends)
	}
	if err != nil {
		back(w, r, to, "nothing deleted: "+err.Error())
		return
	}
	back(w, r, to, "deleted the dead letters of "+shown(pg.Strip, queue))
}
