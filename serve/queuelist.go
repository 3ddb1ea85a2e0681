package serve

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/inspect"
)

// A deployment holds thousands of queues: a list of them is read a page at
// a time, in name order, with a name filter. A page is fetched by the
// queue it follows (after) or precedes (before), not by its number, so
// that a queue created meanwhile neither repeats nor hides a queue on the
// next page.

// Limits of a queue listing.
const (
	// DefaultQueuePage is how many queues a page lists by default.
	DefaultQueuePage = 100
	// MaxQueuePage bounds a page's limit.
	MaxQueuePage = 1000
	// maxFilterLen bounds a filter: no longer than a queue's name.
	maxFilterLen = 249
)

// queueQuery chooses a page of queues: those whose name contains Filter,
// after the queue After or before the queue Before (at most one of them),
// Limit of them. A Filter <lane>/<start> names a lane (Lane), whose lane
// queues starting with Filter the console lists.
type queueQuery struct {
	Filter, After, Before string
	Limit                 int
	Lane                  string
}

// parseQueueQuery reads a listing's parameters: filter, after, before and
// limit (1 to MaxQueuePage, default DefaultQueuePage). A bad one is a 400
// naming it.
func parseQueueQuery(v url.Values) (queueQuery, error) {
	q := queueQuery{Filter: strings.TrimSpace(v.Get("filter")), After: v.Get("after"), Before: v.Get("before"), Limit: DefaultQueuePage}
	if len(q.Filter) > maxFilterLen || !utf8.ValidString(q.Filter) {
		return q, badRequest("filter", "want text of at most %d bytes, part of a queue's name", maxFilterLen)
	}
	if lane, _, ok := strings.Cut(q.Filter, string(onceq.LaneSep)); ok {
		if err := onceq.ValidateQueue(lane); err != nil {
			return q, badRequest("filter", "%q: a filter <lane>/<start> lists the lane queues of a lane, and %q is no lane: %v", q.Filter, lane, err)
		}
		q.Lane = lane
	}
	if q.After != "" && q.Before != "" {
		return q, badRequest("after", "give after or before, not both")
	}
	for name, c := range map[string]string{"after": q.After, "before": q.Before} {
		if c == "" {
			continue
		}
		if err := onceq.ValidateAnyQueue(c); err != nil {
			return q, badRequest(name, "%q: want the name of the queue the page follows or precedes: %v", c, err)
		}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxQueuePage {
			return q, badRequest("limit", "%q: want a number of queues from 1 to %d", l, MaxQueuePage)
		}
		q.Limit = n
	}
	return q, nil
}

// queueListing is a page of queues.
type queueListing struct {
	Query  queueQuery
	Queues []string
	// Total counts the queues that pass the filter; Offset is the place
	// of the page's first among them, from 0.
	Total, Offset int
	// Prev and Next are the cursors of the pages around this one (before
	// and after respectively); "" when there is none.
	Prev, Next string
}

// First and Last number the page's queues among Total, from 1.
func (l queueListing) First() int { return min(l.Offset+1, l.Total) }
func (l queueListing) Last() int  { return l.Offset + len(l.Queues) }

// listQueues returns the page q chooses of all (sorted) that keep keeps.
func listQueues(all []string, keep func(string) bool, q queueQuery) queueListing {
	var match []string
	for _, name := range all {
		if keep(name) {
			match = append(match, name)
		}
	}
	from, to := 0, min(q.Limit, len(match))
	switch {
	case q.After != "":
		from, _ = slices.BinarySearch(match, q.After)
		if from < len(match) && match[from] == q.After {
			from++
		}
		to = min(from+q.Limit, len(match))
	case q.Before != "":
		to, _ = slices.BinarySearch(match, q.Before)
		from = max(to-q.Limit, 0)
		if from == 0 {
			to = min(q.Limit, len(match)) // the first page, whole
		}
	}
	l := queueListing{Query: q, Queues: match[from:to], Total: len(match), Offset: from}
	if from > 0 && from < len(match) {
		l.Prev = match[from]
	}
	if to < len(match) {
		l.Next = match[to-1]
	}
	return l
}

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
// the token sees, in name order, DefaultQueuePage of them with their
// statistics (asked for the page's queues alone, together). A filter
// <lane>/<start> lists the lane queues of lane whose names start so,
// instead of the queues of their own topics.
func (s *Server) homePage(w http.ResponseWriter, r *http.Request, pg *page) {
	pg.Title = "Queues"
	q, err := parseQueueQuery(r.URL.Query())
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		pg.Error = err.Error()
		q = queueQuery{Limit: DefaultQueuePage}
	}
	var list queueListing
	var rows []queueRow
	if err == nil {
		var queues []string
		keep := func(name string) bool { return s.consoleSees(pg.Token, name) && strings.Contains(name, q.Filter) }
		if q.Lane != "" {
			queues, err = s.in.LaneQueues(r.Context(), q.Lane)
			keep = func(name string) bool { return s.consoleSees(pg.Token, name) && strings.HasPrefix(name, q.Filter) }
		} else if s.cfg.lane != "" && pg.Token.Namespace != auth.AllNamespaces {
			// A namespace's queues are on the server's lane.
			queues, err = s.queueNames(r.Context())
		} else {
			queues, err = s.in.Queues(r.Context())
		}
		list = listQueues(queues, keep, q)
		var sts []inspect.QueueStats
		if err == nil {
			sts, err = s.in.StatsOf(r.Context(), list.Queues)
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
	s.render(w, "home", pg)
}
