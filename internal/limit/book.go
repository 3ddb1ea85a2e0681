package limit

import (
	"slices"
	"sort"
	"time"
)

// Book is the fold of the limits topic: each queue's limit, and the claims
// on it. It is not safe for concurrent use; Client guards it.
type Book struct {
	queues map[string]*queueBook
}

// queueBook is one queue's part of the Book.
type queueBook struct {
	limit  Limit
	claims map[string]*held // by holder and nonce
	// starts are the At of the admitted claims, ascending, those of the
	// last windows only.
	starts []int64
}

// held is a claim, and how the Book decided it.
type held struct {
	Claim
	admitted bool
}

// NewBook returns an empty Book.
func NewBook() *Book { return &Book{queues: map[string]*queueBook{}} }

func (b *Book) queue(q string) *queueBook {
	qb := b.queues[q]
	if qb == nil {
		qb = &queueBook{claims: map[string]*held{}}
		b.queues[q] = qb
	}
	return qb
}

// Limits returns every queue's limit.
func (b *Book) Limits() map[string]Limit {
	out := map[string]Limit{}
	for q, qb := range b.queues {
		if !qb.limit.None() {
			out[q] = qb.limit
		}
	}
	return out
}

// Apply folds one record, written at ts (the broker's append time).
func (b *Book) Apply(r Record, ts time.Time) {
	qb := b.queue(r.Queue)
	if r.Holder == "" {
		qb.limit = r.Limit
		return
	}
	key := r.Holder + "/" + r.Nonce
	now := ts.UnixMilli()
	switch h := qb.claims[key]; {
	case r.Claim == nil:
		delete(qb.claims, key)
		return
	case h != nil:
		if r.Claim.Withdrawn && h.admitted && !h.Withdrawn {
			qb.dropStart(h.At)
		}
		h.Released = h.Released || r.Claim.Released
		h.Withdrawn = h.Withdrawn || r.Claim.Withdrawn
		return
	case r.Claim.Released:
		// A release whose claim compaction dropped: the claim was
		// admitted (only those are released), and its start counts
		// unless it was withdrawn.
		qb.claims[key] = &held{Claim: *r.Claim, admitted: true}
		if !r.Claim.Withdrawn {
			qb.addStart(r.Claim.At)
		}
		return
	}
	qb.prune(now)
	c := *r.Claim
	h := &held{Claim: c}
	qb.claims[key] = h
	if qb.runningAt(now) >= qb.limit.Running && qb.limit.Running > 0 {
		return
	}
	if qb.limit.Count > 0 && !qb.fits(c.At) {
		return
	}
	h.admitted = true
	qb.addStart(c.At)
}

// addStart counts a start at at in the windows of the queue's rate.
func (qb *queueBook) addStart(at int64) {
	if qb.limit.Count == 0 {
		return
	}
	qb.starts = slices.Insert(qb.starts, sort.Search(len(qb.starts), func(i int) bool { return qb.starts[i] > at }), at)
}

// dropStart takes one start at at out of the windows: a claim withdrawn
// before its task started.
func (qb *queueBook) dropStart(at int64) {
	i := sort.Search(len(qb.starts), func(i int) bool { return qb.starts[i] >= at })
	if i < len(qb.starts) && qb.starts[i] == at {
		qb.starts = slices.Delete(qb.starts, i, i+1)
	}
}

// Admitted reports how the Book decided holder's claim nonce on queue:
// decided is false until the Book folded it.
func (b *Book) Admitted(queue, holder, nonce string) (admitted, decided bool) {
	qb := b.queues[queue]
	if qb == nil {
		return false, false
	}
	h := qb.claims[holder+"/"+nonce]
	if h == nil {
		return false, false
	}
	return h.admitted, true
}

// Running counts the claims on queue admitted, not released and not past
// their Until at now.
func (b *Book) Running(queue string, now time.Time) int {
	if qb := b.queues[queue]; qb != nil {
		return qb.runningAt(now.UnixMilli())
	}
	return 0
}

// Next returns when a claim on queue could next be admitted, at after
// or later: by the windows of its rate, and by the Until of the claims
// that hold its running limit full (a release may come sooner).
func (b *Book) Next(queue string, after time.Time) time.Time {
	qb := b.queues[queue]
	if qb == nil {
		return after
	}
	t := after.UnixMilli()
	if l := qb.limit.Running; l > 0 {
		var ends []int64
		for _, h := range qb.claims {
			if h.admitted && !h.Released && h.Until > t {
				ends = append(ends, h.Until)
			}
		}
		if len(ends) >= l {
			slices.Sort(ends)
			t = ends[len(ends)-l] + 1
		}
	}
	if qb.limit.Count > 0 && !qb.fits(t) {
		// A window lets a start in only when a start leaves it: the
		// first time that fits is one of the starts' ends, s+window.
		// The last of them fits: no start is kept after it.
		w := qb.window()
		for i := sort.Search(len(qb.starts), func(i int) bool { return qb.starts[i]+w > t }); i < len(qb.starts); i++ {
			if end := qb.starts[i] + w; qb.fits(end) {
				t = end
				break
			}
		}
	}
	return time.UnixMilli(t)
}

// window is the span that holds at most Count starts.
func (qb *queueBook) window() int64 { return (qb.limit.Per + Margin).Milliseconds() }

// prune drops the starts no window of a claim from now on reaches: those
// two windows or more before now (one of slack, for claims that name a
// start a little before their record's time), and every start while the
// queue has no rate; and the claims that no longer run, once their start
// is that old (a claim's holder reads its decision as soon as the Book
// folds it, and only running claims decide others).
func (qb *queueBook) prune(now int64) {
	cut := now - 2*qb.window()
	if qb.limit.Count == 0 {
		qb.starts = qb.starts[:0]
		cut = now - 2*int64(Margin/time.Millisecond)
	}
	for k, h := range qb.claims {
		if (h.Released || h.Until <= now || !h.admitted) && h.At < cut {
			delete(qb.claims, k)
		}
	}
	if qb.limit.Count == 0 {
		return
	}
	if i := sort.Search(len(qb.starts), func(i int) bool { return qb.starts[i] >= cut }); i > 0 {
		qb.starts = slices.Delete(qb.starts, 0, i)
	}
}

// runningAt counts the admitted claims not released and not past Until at
// now.
func (qb *queueBook) runningAt(now int64) int {
	n := 0
	for _, h := range qb.claims {
		if h.admitted && !h.Released && h.Until > now {
			n++
		}
	}
	return n
}

// fits reports whether a start at t keeps every window to Count starts.
func (qb *queueBook) fits(t int64) bool {
	w, c := qb.window(), qb.limit.Count
	s := qb.starts
	// The starts in (t-w, t+w) with t among them, ascending: every window
	// of w that holds t lies within.
	lo := sort.Search(len(s), func(i int) bool { return s[i] > t-w })
	hi := sort.Search(len(s), func(i int) bool { return s[i] >= t+w })
	p := sort.Search(len(s), func(i int) bool { return s[i] > t })
	near := make([]int64, 0, hi-lo+1)
	near = append(near, s[lo:p]...)
	near = append(near, t)
	near = append(near, s[p:hi]...)
	// A window [x, x+w) holds more than c starts iff some c+1 consecutive
	// starts span less than w.
	for i := 0; i+c < len(near); i++ {
		if near[i+c]-near[i] < w {
			return false
		}
	}
	return true
}
