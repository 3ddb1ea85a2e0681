package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// Kinds of the problems Choose reports.
var (
	// ErrNotFound: no dead letter has the ID asked for.
	ErrNotFound = errors.New("dead letter not found")
	// ErrNotRequeueable: the dead letter is malformed, or its task would
	// be refused on submission.
	ErrNotRequeueable = errors.New("cannot be requeued")
)

// Requeue is a dead letter chosen to go back to its queue, and the task it
// becomes there.
type Requeue struct {
	From Letter
	Task onceq.Task
}

// Coordinates names a dead letter within its topic: "<partition>/<offset>",
// the value of onceq-requeued on its incarnations.
func Coordinates(l *Letter) string {
	return strconv.FormatInt(int64(l.Partition), 10) + "/" + strconv.FormatInt(l.Offset, 10)
}

// Incarnation returns the task a dead letter becomes when requeued to
// queue at now (see the package documentation): the same ID, key, payload,
// headers and last error, Requeued set to the dead letter's coordinates,
// no failure time, due at now, no expiry already past, and attempt 1 if
// resetAttempts. The task is validated as a producer would.
func Incarnation(l *Letter, queue string, resetAttempts bool, now time.Time) (onceq.Task, error) {
	if l.Malformed != nil {
		return onceq.Task{}, fmt.Errorf("dlq: dead letter %s of %q: %w: it is malformed (%v); fix it and submit it again with onceq produce",
			Coordinates(l), l.Task.ID, ErrNotRequeueable, l.Malformed)
	}
	t := l.Task.Clone()
	t.Queue = queue
	t.Requeued = Coordinates(l)
	t.Failed = time.Time{}
	// Due now: it runs at once, and its latency counts from the requeue,
	// not from its first submission.
	t.Due, t.Delay = now.Truncate(time.Millisecond), 0
	if !t.Expires.IsZero() && !t.Expires.After(now) {
		t.Expires = time.Time{}
	}
	if resetAttempts {
		t.Attempt = 1
	}
	if err := t.Validate(0); err != nil {
		return onceq.Task{}, fmt.Errorf("dlq: dead letter %s of %q: %w: %v", Coordinates(l), l.Task.ID, ErrNotRequeueable, err)
	}
	return t, nil
}

// Choose picks the dead letters to requeue to queue: for each of ids, or
// for every ID when ids is empty, the newest dead letter of that ID (the
// latest failure; the higher partition and offset on a tie), since older
// ones are earlier incarnations. It returns them in partition and offset
// order with their incarnations, and the problems: an ID without dead
// letters (ErrNotFound), a chosen dead letter that cannot be requeued
// (ErrNotRequeueable). A malformed dead letter without a readable ID is a
// problem only when every ID is asked for. Only the newest well-formed
// dead letter of an ID is chosen; a malformed one is reported only when
// its ID has no other.
func Choose(queue string, letters []Letter, ids []string, resetAttempts bool, now time.Time) ([]Requeue, []error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	newest := map[string]*Letter{}    // well-formed, by ID
	malformed := map[string]*Letter{} // newest malformed, by ID, for reports
	var problems []error
	for i := range letters {
		l := &letters[i]
		id := l.Task.ID
		if len(ids) > 0 && !want[id] {
			continue
		}
		if l.Malformed != nil {
			if id == "" {
				_, err := Incarnation(l, queue, resetAttempts, now)
				problems = append(problems, err)
			} else if m := malformed[id]; m == nil || newer(l, m) {
				malformed[id] = l
			}
			continue
		}
		if n := newest[id]; n == nil || newer(l, n) {
			newest[id] = l
		}
	}
	var out []Requeue
	for _, l := range newest {
		t, err := Incarnation(l, queue, resetAttempts, now)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		out = append(out, Requeue{From: *l, Task: t})
	}
	for id, l := range malformed {
		if newest[id] == nil {
			_, err := Incarnation(l, queue, resetAttempts, now)
			problems = append(problems, err)
		}
	}
	for _, id := range ids {
		if newest[id] == nil && malformed[id] == nil {
			problems = append(problems, fmt.Errorf("dlq: task %q: %w in %s: check the ID with \"onceq dlq list %s\"",
				id, ErrNotFound, broker.DLQTopic(queue), queue))
		}
	}
	slices.SortFunc(out, func(a, b Requeue) int { return compareAt(&a.From, &b.From) })
	slices.SortFunc(problems, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	return out, problems
}

// newer reports whether a failed after b, or at the same time and later
// in the topic.
func newer(a, b *Letter) bool {
	if !a.Failed.Equal(b.Failed) {
		return a.Failed.After(b.Failed)
	}
	return compareAt(a, b) > 0
}

func compareAt(a, b *Letter) int {
	if c := cmp.Compare(a.Partition, b.Partition); c != 0 {
		return c
	}
	return cmp.Compare(a.Offset, b.Offset)
}

// A Submitter writes tasks in one transaction: every one of them becomes
// visible to workers, or none. *producer.Producer is one (SubmitAll); the
// package takes the interface so that it stays below the producer, which
// routes delayed tasks through the delay package, whose service writes
// dead letters with this package's encoder.
type Submitter interface {
	SubmitAll(ctx context.Context, tasks []onceq.Task) error
}

// Write submits the requeued tasks in one transaction of p: every one of
// them becomes visible to workers, or none.
func Write(ctx context.Context, p Submitter, rs []Requeue) error {
	if len(rs) == 0 {
		return nil
	}
	tasks := make([]onceq.Task, len(rs))
	for i := range rs {
		tasks[i] = rs[i].Task
	}
	if err := p.SubmitAll(ctx, tasks); err != nil {
		return fmt.Errorf("dlq: nothing requeued: %w", err)
	}
	return nil
}
