// Package queuelist pages through a list of queues, for the API's list
// of a namespace's queues and the console's home page alike. A deployment
// holds thousands of queues: a list of them is read a page at a time, in
// name order, with a name filter. A page is fetched by the queue it
// follows (after) or precedes (before), not by its number, so that a
// queue created meanwhile neither repeats nor hides a queue on the next
// page.
package queuelist

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/onceq/onceq"
)

// Limits of a queue listing.
const (
	// DefaultPage is how many queues a page lists by default.
	DefaultPage = 100
	// MaxPage bounds a page's limit.
	MaxPage = 1000
	// maxFilterLen bounds a filter: no longer than a queue's name.
	maxFilterLen = 249
)

// Query chooses a page of queues: those whose name contains Filter,
// after the queue After or before the queue Before (at most one of them),
// Limit of them. A Filter <lane>/<start> names a lane (Lane), whose lane
// queues starting with Filter the console lists.
type Query struct {
	Filter, After, Before string
	Limit                 int
	Lane                  string
}

// Error is a bad parameter of a listing: Field names it.
type Error struct{ Field, Msg string }

func (e *Error) Error() string { return e.Field + ": " + e.Msg }

func bad(field, format string, args ...any) *Error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Parse reads a listing's parameters: filter, after, before and limit (1
// to MaxPage, default DefaultPage). A bad one is an Error naming it.
func Parse(v url.Values) (Query, error) {
	q := Query{Filter: strings.TrimSpace(v.Get("filter")), After: v.Get("after"), Before: v.Get("before"), Limit: DefaultPage}
	if len(q.Filter) > maxFilterLen || !utf8.ValidString(q.Filter) {
		return q, bad("filter", "want text of at most %d bytes, part of a queue's name", maxFilterLen)
	}
	if lane, _, ok := strings.Cut(q.Filter, string(onceq.LaneSep)); ok {
		if err := onceq.ValidateQueue(lane); err != nil {
			return q, bad("filter", "%q: a filter <lane>/<start> lists the lane queues of a lane, and %q is no lane: %v", q.Filter, lane, err)
		}
		q.Lane = lane
	}
	if q.After != "" && q.Before != "" {
		return q, bad("after", "give after or before, not both")
	}
	for name, c := range map[string]string{"after": q.After, "before": q.Before} {
		if c == "" {
			continue
		}
		if err := onceq.ValidateAnyQueue(c); err != nil {
			return q, bad(name, "%q: want the name of the queue the page follows or precedes: %v", c, err)
		}
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxPage {
			return q, bad("limit", "%q: want a number of queues from 1 to %d", l, MaxPage)
		}
		q.Limit = n
	}
	return q, nil
}

// Listing is a page of queues.
type Listing struct {
	Query  Query
	Queues []string
	// Total counts the queues that pass the filter; Offset is the place
	// of the page's first among them, from 0.
	Total, Offset int
	// Prev and Next are the cursors of the pages around this one (before
	// and after respectively); "" when there is none.
	Prev, Next string
}

// First and Last number the page's queues among Total, from 1.
func (l Listing) First() int { return min(l.Offset+1, l.Total) }
func (l Listing) Last() int  { return l.Offset + len(l.Queues) }

// List returns the page q chooses of all (sorted) that keep keeps.
func List(all []string, keep func(string) bool, q Query) Listing {
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
	l := Listing{Query: q, Queues: match[from:to], Total: len(match), Offset: from}
	if from > 0 && from < len(match) {
		l.Prev = match[from]
	}
	if to < len(match) {
		l.Next = match[to-1]
	}
	return l
}
