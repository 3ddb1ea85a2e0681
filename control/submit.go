package control

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/producer"
)

// A Submission tells what SubmitUnique did with a task.
type Submission struct {
	ID string
	// New is true when the ID was unknown and the task was submitted now;
	// Receipt tells where it was written.
	New     bool
	Receipt producer.Receipt
	// Record is the task's last record when the ID was already known and
	// nothing was submitted: its State says whether the task is still to
	// run (pending, scheduled, retrying) or final, with its result or
	// error.
	Record onceq.TaskRecord
}

// ErrDuplicateID is returned by SubmitUnique when one call names an ID
// twice.
var ErrDuplicateID = errors.New("control: a task ID appears twice in one SubmitUnique: give each task its own ID")

// SubmitUnique submits the tasks whose IDs the records of their queues do
// not know, in one transaction of p, each with its pending (or scheduled)
// record (producer's Tx.SubmitPending), and answers for each task whether
// it was new or, with its record, already known. The plain Submit stays
// the fast path: it does not ask.
//
// A task without an ID is new: it gets a generated one, which its
// Submission and Receipt tell. Within one process
// SubmitUnique answers "known" for an ID it submitted a moment ago even
// before the view has read it back. Across processes, two calls for a new
// ID at the same moment may both submit it: both say New, and the
// workers' deduplication still runs it once.
func (c *Controller) SubmitUnique(ctx context.Context, p *producer.Producer, tasks ...onceq.Task) ([]Submission, error) {
	keys := make([]string, len(tasks))
	for i, t := range tasks {
		if err := onceq.ValidateTaskQueue(t.Queue); err != nil {
			return nil, fmt.Errorf("control: task %d: %w", i, err)
		}
		if t.ID == "" {
			continue
		}
		if err := onceq.ValidateID(t.ID); err != nil {
			return nil, fmt.Errorf("control: task %d: %w", i, err)
		}
		keys[i] = t.Queue + "\x00" + t.ID
		if slices.Contains(keys[:i], keys[i]) {
			return nil, fmt.Errorf("%w: %s of %s", ErrDuplicateID, t.ID, t.Queue)
		}
	}
	unlock := c.lockIDs(keys)
	defer unlock()
	subs := make([]Submission, len(tasks))
	var fresh []int // the indexes of the tasks to submit
	for i, t := range tasks {
		if t.ID == "" {
			fresh = append(fresh, i)
			continue
		}
		subs[i].ID = t.ID
		r, err := c.in.Get(ctx, t.Queue, t.ID)
		switch {
		case err == nil:
			subs[i].Record = r
		case errors.Is(err, inspect.ErrNotFound) || errors.Is(err, inspect.ErrNoQueue):
			fresh = append(fresh, i)
		default:
			return nil, err
		}
	}
	if len(fresh) == 0 {
		return subs, nil
	}
	var receipts []producer.Receipt
	err := p.Tx(ctx, func(tx *producer.Tx) error {
		for _, i := range fresh {
			if err := tx.SubmitPending(tasks[i]); err != nil {
				return err
			}
		}
		var err error
		receipts, err = tx.Receipts(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for j, i := range fresh {
		subs[i].ID, subs[i].New, subs[i].Receipt = receipts[j].ID, true, receipts[j]
		if keys[i] != "" {
			c.in.Expect(pendingRecord(tasks[i], receipts[j], now))
		}
	}
	return subs, nil
}

// pendingRecord is the record SubmitPending wrote for a task, as far as
// its receipt tells: the partition of a task written to its queue is its
// receipt's; a delayed one's receipt names its bucket's, and its record
// names none until the view reads it back.
func pendingRecord(t onceq.Task, rc producer.Receipt, now time.Time) onceq.TaskRecord {
	r := onceq.TaskRecord{ID: t.ID, Queue: t.Queue, State: onceq.StatePending, MaxAttempts: t.MaxAttempts, Priority: t.Priority, Enqueued: now}
	if !rc.Delayed {
		r.Partition = rc.Partition
	} else {
		r.State = onceq.StateScheduled
		r.Due = t.Due
		if r.Due.IsZero() {
			r.Due = now.Add(t.Delay)
		}
	}
	return r
}

// lockIDs locks the stripes of keys, in order, and returns their unlock:
// one process never submits the same ID from two calls at once.
func (c *Controller) lockIDs(keys []string) func() {
	var stripes []int
	for _, k := range keys {
		if k != "" {
			stripes = append(stripes, int(maphash.String(seed, k)%uint64(len(c.idLocks))))
		}
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	for _, s := range stripes {
		c.idLocks[s].Lock()
	}
	return func() {
		for _, s := range slices.Backward(stripes) {
			c.idLocks[s].Unlock()
		}
	}
}

var seed = maphash.MakeSeed()
