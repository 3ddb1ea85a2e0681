package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/producer"
)

// load is the work a run offers: Tasks distinct IDs, a fraction of them
// submitted twice, in a seeded random order, with payloads of Size bytes
// whose first 8 carry the submission time.
type load struct {
	prefix string  // task IDs are prefix + index
	order  []int32 // submission order of task indexes, duplicates included
	want   []uint8 // submissions per index: 1, or 2 for a duplicate
	filler []byte  // the payload after the timestamp
	size   int
	// The handler-time profile: a handler sleeps slowFor for the indexes
	// set in slow (nil: none) and work for the others.
	work, slowFor time.Duration
	slow          []bool
	slowTasks     int
}

func newLoad(o *Options, prefix string, rng *rand.Rand) *load {
	l := &load{prefix: prefix, want: make([]uint8, o.Tasks), size: o.Size, filler: make([]byte, o.Size-MinSize)}
	l.order = make([]int32, 0, o.Tasks+int(float64(o.Tasks)*o.Duplicates)+16)
	for i := range o.Tasks {
		l.order = append(l.order, int32(i))
		l.want[i] = 1
	}
	for i := range o.Tasks {
		if o.Duplicates > 0 && rng.Float64() < o.Duplicates {
			l.order = append(l.order, int32(i))
			l.want[i] = 2
		}
	}
	rng.Shuffle(len(l.order), func(i, j int) { l.order[i], l.order[j] = l.order[j], l.order[i] })
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	for i := range l.filler {
		l.filler[i] = letters[rng.IntN(len(letters))]
	}
	l.work, l.slowFor = o.Work, o.Slow.Duration
	if k := o.Slow.tasks(o.Tasks); k > 0 {
		// A stream of its own, so that a profile leaves the rest of the
		// load of a seed as it was.
		l.slow, l.slowTasks = pick(rand.New(rand.NewPCG(o.Seed, 2)), o.Tasks, k), k
	}
	return l
}

// pick marks k of n indexes at random: Floyd's sampling, in O(k) draws.
func pick(rng *rand.Rand, n, k int) []bool {
	set := make([]bool, n)
	for j := n - k; j < n; j++ {
		if t := rng.IntN(j + 1); set[t] {
			set[j] = true
		} else {
			set[t] = true
		}
	}
	return set
}

// workFor is how long the handler of task id sleeps.
func (l *load) workFor(id string) time.Duration {
	if l.slow != nil {
		if i, ok := l.index(id); ok && l.slow[i] {
			return l.slowFor
		}
	}
	return l.work
}

// longestWork is the longest sleep of a handler of the load.
func (l *load) longestWork() time.Duration {
	if l.slow != nil {
		return max(l.work, l.slowFor)
	}
	return l.work
}

// id is the task ID of index i.
func (l *load) id(i int32) string { return l.prefix + strconv.Itoa(int(i)) }

// index is the inverse of id.
func (l *load) index(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, l.prefix)
	if !ok || s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(l.want) {
		return 0, false
	}
	return i, true
}

// payload returns a new payload stamped with now.
func (l *load) payload(now time.Time) []byte {
	p := make([]byte, l.size)
	binary.BigEndian.PutUint64(p, uint64(now.UnixNano()))
	copy(p[MinSize:], l.filler)
	return p
}

// stamped returns the submission time a payload carries, if it has one.
func stamped(payload []byte) (time.Time, bool) {
	if len(payload) < MinSize {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(payload))), true
}

// task returns the task of index i for queue, stamped with now. A task
// submitted once stands for one submitted without an ID: its ID is marked
// generated, as the producer marks its own. One submitted twice carries
// an ID the client chose, an idempotency key.
func (l *load) task(i int32, queue string, now time.Time) onceq.Task {
	var t onceq.Task
	l.fill(&t, i, queue, now)
	return t
}

// fill sets *t to the task of index i, as task returns it: submitAll
// builds a batch's tasks in place, as a caller of SubmitMany would,
// rather than copying each into the batch.
func (l *load) fill(t *onceq.Task, i int32, queue string, now time.Time) {
	*t = onceq.Task{ID: l.id(i), GeneratedID: l.want[i] == 1, Queue: queue, Payload: l.payload(now)}
}

// pacer spaces submissions at rate per second; rate 0 does not wait.
type pacer struct {
	rate  int
	start time.Time
	sent  int
}

func newPacer(rate int) *pacer { return &pacer{rate: rate, start: time.Now()} }

// batch is how many submissions go at once: submitBatch flat out, and at a
// rate what 5 ms of it holds, so that the submissions come every 5 ms.
func (p *pacer) batch() int {
	if p.rate == 0 {
		return submitBatch
	}
	return min(submitBatch, max(1, p.rate/200))
}

// wait blocks until the next n submissions are due: until the last of
// them is.
func (p *pacer) wait(ctx context.Context, n int) error {
	p.sent += n
	if p.rate == 0 {
		return nil
	}
	d := time.Until(p.start.Add(time.Duration(float64(p.sent) / float64(p.rate) * float64(time.Second))))
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// submitBatch is how many tasks the bench submits with one call of
// SubmitMany, and the raw baseline produces with one promise, flat out.
const submitBatch = 1000

// submitAll submits the tasks of order to queue through p at rate (0: flat
// out) and waits for every acknowledgment. It submits them in batches
// with SubmitMany, as a caller producing in bulk does: the tasks of a
// batch are stamped with one time, and their latencies count from it.
// edit may change a task before it is sent (a due time); acked is called
// for each acknowledged submission with the time it took. Refused
// submissions are submitted again with the same ID, which is safe:
// duplicates of an ID run once.
func (l *load) submitAll(ctx context.Context, p *producer.Producer, order []int32, queue string, rate int, edit func(*onceq.Task), acked func(time.Duration)) error {
	var (
		mu       sync.Mutex
		failed   []int32
		firstErr error
	)
	todo := order
	batch := make([]onceq.Task, 0, submitBatch)
	for round := 0; len(todo) > 0; round++ {
		if round > 0 {
			if round > 20 {
				return fmt.Errorf("bench: %d submissions still failing after %d rounds; the first error: %w", len(todo), round, firstErr)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		pace := newPacer(rate)
		for len(todo) > 0 {
			part := todo[:min(pace.batch(), len(todo))]
			todo = todo[len(part):]
			if err := pace.wait(ctx, len(part)); err != nil {
				return err
			}
			now := time.Now()
			batch = batch[:len(part)] // part is at most submitBatch, the capacity
			for j, i := range part {
				l.fill(&batch[j], i, queue, now)
				if edit != nil {
					edit(&batch[j])
				}
			}
			p.SubmitMany(ctx, batch, func(j int, _ producer.Receipt, err error) {
				if err != nil {
					mu.Lock()
					failed = append(failed, part[j])
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if acked != nil {
					acked(time.Since(now))
				}
			})
		}
		if err := p.Flush(ctx); err != nil {
			return err
		}
		mu.Lock()
		todo, failed = failed, nil
		mu.Unlock()
		if len(todo) > 0 && permanent(firstErr) {
			return fmt.Errorf("bench: submitting: %w", firstErr)
		}
	}
	return nil
}

// permanent reports whether a submission error cannot go away by trying
// again: the task or its queue is wrong.
func permanent(err error) bool {
	var oe *onceq.Error
	return errors.As(err, &oe) || errors.Is(err, producer.ErrQueueNotFound) || errors.Is(err, producer.ErrClosed)
}
