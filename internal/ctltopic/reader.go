package ctltopic

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/table"
)

// Reader follows the control topic: which tasks are canceled and which
// queues are paused. It is safe for concurrent use.
type Reader struct {
	f   *table.Follower
	log *slog.Logger

	// Every task asks Canceled and Paused: while nothing is canceled or
	// paused, the answers are these flags, without the lock.
	anyCanceled, anyPaused atomic.Bool

	mu       sync.RWMutex
	canceled map[string]map[string]time.Time // queue -> ID -> Until (zero: none)
	nCancel  int
	paused   map[string]bool
	nPaused  int
	priority map[string]time.Time // topic -> its newest priority note
	onPause  func(queue string, paused bool)
}

// Open reads the control topic (creating it if needed) up to its end as
// of the call, and follows it from then on: a task canceled before Open
// is canceled for the Reader at once. onPause, if not nil, is called with
// every change of a queue's pause state, those read before Open returns
// included, on the Reader's goroutine.
func Open(ctx context.Context, conn broker.Conn, log *slog.Logger, onPause func(queue string, paused bool)) (*Reader, error) {
	r := &Reader{log: log, canceled: map[string]map[string]time.Time{}, paused: map[string]bool{}, priority: map[string]time.Time{}, onPause: onPause}
	f, err := table.Follow(ctx, conn, Topic, log, r.apply)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	r.f = f
	return r, nil
}

func (r *Reader) apply(rec *kgo.Record) {
	e, err := Decode(rec.Key, rec.Value)
	if err != nil {
		r.log.Warn("control record skipped", "offset", rec.Offset, "err", err)
		return
	}
	r.mu.Lock()
	var changed bool
	switch {
	case e.Priority:
		if e.Deleted {
			delete(r.priority, e.Queue)
		} else if e.At.After(r.priority[e.Queue]) {
			r.priority[e.Queue] = e.At
		}
	case e.ID != "" && e.Deleted:
		if _, ok := r.canceled[e.Queue][e.ID]; ok {
			delete(r.canceled[e.Queue], e.ID)
			r.nCancel--
		}
	case e.ID != "":
		if r.canceled[e.Queue] == nil {
			r.canceled[e.Queue] = map[string]time.Time{}
		}
		if _, ok := r.canceled[e.Queue][e.ID]; !ok {
			r.nCancel++
		}
		r.canceled[e.Queue][e.ID] = e.Until
	default:
		paused := e.Paused && !e.Deleted
		changed = r.paused[e.Queue] != paused
		if changed && paused {
			r.nPaused++
		} else if changed {
			r.nPaused--
		}
		r.paused[e.Queue] = paused
	}
	r.anyCanceled.Store(r.nCancel > 0)
	r.anyPaused.Store(r.nPaused > 0)
	fn := r.onPause
	r.mu.Unlock()
	if changed && fn != nil {
		fn(e.Queue, e.Paused && !e.Deleted)
	}
}

// Canceled reports whether task id of queue is canceled: a cancel of it
// is in the topic and has not lapsed (Entry.Until).
func (r *Reader) Canceled(queue, id string) bool {
	if !r.anyCanceled.Load() {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	until, ok := r.canceled[queue][id]
	return ok && (until.IsZero() || time.Now().Before(until))
}

// PriorityNoted reports whether a priority note of topic younger than
// PriorityNoteLife was read.
func (r *Reader) PriorityNoted(topic string) bool {
	r.mu.RLock()
	at, ok := r.priority[topic]
	r.mu.RUnlock()
	return ok && time.Since(at) < PriorityNoteLife
}

// AnyPaused reports whether any queue is paused.
func (r *Reader) AnyPaused() bool { return r.anyPaused.Load() }

// Paused reports whether queue is paused.
func (r *Reader) Paused(queue string) bool {
	if !r.anyPaused.Load() {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.paused[queue]
}

// Close stops following the topic.
func (r *Reader) Close() { r.f.Close() }

// Sync returns once the Reader has applied everything the topic held when
// Sync was called: what was written before, a pause say, shows after.
func (r *Reader) Sync(ctx context.Context) error {
	if err := r.f.Sync(ctx); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	return nil
}

// PausedQueues returns the queues paused now.
func (r *Reader) PausedQueues() map[string]bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[string]bool{}
	for q, p := range r.paused {
		if p {
			out[q] = true
		}
	}
	return out
}
