package console

import (
	"net/http"
	"strings"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/serve/internal/queuelist"
)

// queueRow is a queue on the home page.
type queueRow struct {
	Queue   string
	Paused  bool
	Tasks   map[onceq.TaskState]int64
	Failed  int64 // failed attempts (inspect.QueueStats.Failed)
	Waiting int64 // pending or overdue: due, and not started
	Groups  []inspect.GroupStats
	Overdue int64
	// LaneQueues counts the lane queues on the queue's topic.
	LaneQueues int
}

// homePage: GET /console/?filter=&after=&before=: a page of the queues
// the token sees, in name order, queuelist.DefaultPage of them with their
// statistics (asked for the page's queues alone, together). A filter
// <lane>/<start> lists the lane queues of lane whose names start so,
// instead of the queues of their own topics.
func (c *Console) homePage(w http.ResponseWriter, r *http.Request, pg *page) {
	pg.Title = "Queues"
	q, err := queuelist.Parse(r.URL.Query())
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		pg.Error = err.Error()
		q = queuelist.Query{Limit: queuelist.DefaultPage}
	}
	var list queuelist.Listing
	var rows []queueRow
	if err == nil {
		var queues []string
		keep := func(name string) bool { return c.consoleSees(pg.Token, name) && strings.Contains(name, q.Filter) }
		if q.Lane != "" {
			queues, err = c.in.LaneQueues(r.Context(), q.Lane)
			keep = func(name string) bool { return c.consoleSees(pg.Token, name) && strings.HasPrefix(name, q.Filter) }
		} else if c.lane != "" && pg.Token.Namespace != auth.AllNamespaces {
			// A namespace's queues are on the server's lane.
			queues, err = c.api.QueueNames(r.Context())
		} else {
			queues, err = c.in.Queues(r.Context())
		}
		list = queuelist.List(queues, keep, q)
		var sts []inspect.QueueStats
		if err == nil {
			sts, err = c.in.StatsOf(r.Context(), list.Queues)
		}
		for _, st := range sts {
			row := queueRow{Queue: st.Queue, Paused: st.Paused, Tasks: st.Tasks, Failed: st.Failed, Groups: st.Groups, Overdue: st.Overdue, LaneQueues: st.LaneQueues}
			if st.LaneQueues > 0 {
				row.Tasks, row.Failed = st.LaneTasks, st.LaneFailed // the lane in total
			}
			// Waiting to start, as the records say: pending, and
			// scheduled or retrying past their due time. A group's
			// offsets also stand below tasks that finished after a
			// slow one, so they are shown apart, per group.
			row.Waiting = row.Tasks[onceq.StatePending] + st.Overdue
			rows = append(rows, row)
		}
		if err != nil {
			pg.Error = err.Error()
		}
	}
	pg.Data = map[string]any{"Queues": rows, "States": onceq.TaskStates, "List": list, "Lane": q.Lane}
	c.render(w, "home", pg)
}
