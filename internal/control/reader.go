package control

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// Reader follows the control topic: which tasks are canceled and which
// queues are paused. It is safe for concurrent use.
type Reader struct {
	cl  *kgo.Client
	log *slog.Logger

	// Every task asks Canceled and Paused: while nothing is canceled or
	// paused, the answers are these flags, without the lock.
	anyCanceled, anyPaused atomic.Bool

	mu       sync.RWMutex
	canceled map[string]map[string]struct{} // queue -> IDs
	nCancel  int
	paused   map[string]bool
	nPaused  int
	onPause  func(queue string, paused bool)

	done chan struct{}
}

// Open reads the control topic (creating it if needed) up to its end as
// of the call, and follows it from then on: a task canceled before Open
// is canceled for the Reader at once. onPause, if not nil, is called with
// every change of a queue's pause state, those read before Open returns
// included, on the Reader's goroutine.
func Open(ctx context.Context, conn broker.Conn, log *slog.Logger, onPause func(queue string, paused bool)) (*Reader, error) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	if err := Ensure(ctx, adm); err != nil {
		return nil, err
	}
	ends, err := adm.Kadm().ListCommittedOffsets(ctx, Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("control: end of %s: %w", Topic, err)
	}
	end := int64(0)
	if o, ok := ends.Lookup(Topic, 0); ok {
		end = o.Offset
	}
	cl, err := conn.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{Topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // markers take offsets: how the end is known
		kgo.WithLogger(broker.KgoLogger(log)),
	)
	if err != nil {
		return nil, err
	}
	r := &Reader{cl: cl, log: log, canceled: map[string]map[string]struct{}{}, paused: map[string]bool{}, onPause: onPause, done: make(chan struct{})}
	pos := int64(0)
	for pos < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			cl.Close()
			return nil, fmt.Errorf("control: reading %s: %w", Topic, err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			r.apply(rec)
			pos = rec.Offset + 1
		})
	}
	go r.follow()
	return r, nil
}

// follow applies what the topic gets until Close.
func (r *Reader) follow() {
	defer close(r.done)
	for {
		fs := r.cl.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(_ string, _ int32, err error) {
			r.log.Warn("reading the control topic", "err", err)
		})
		fs.EachRecord(r.apply)
	}
}

func (r *Reader) apply(rec *kgo.Record) {
	if rec.Attrs.IsControl() {
		return
	}
	e, err := Decode(rec.Key, rec.Value)
	if err != nil {
		r.log.Warn("control record skipped", "offset", rec.Offset, "err", err)
		return
	}
	r.mu.Lock()
	var changed bool
	switch {
	case e.ID != "" && e.Deleted:
		if _, ok := r.canceled[e.Queue][e.ID]; ok {
			delete(r.canceled[e.Queue], e.ID)
			r.nCancel--
		}
	case e.ID != "":
		if r.canceled[e.Queue] == nil {
			r.canceled[e.Queue] = map[string]struct{}{}
		}
		if _, ok := r.canceled[e.Queue][e.ID]; !ok {
			r.canceled[e.Queue][e.ID] = struct{}{}
			r.nCancel++
		}
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

// Canceled reports whether task id of queue is canceled.
func (r *Reader) Canceled(queue, id string) bool {
	if !r.anyCanceled.Load() {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.canceled[queue][id]
	return ok
}

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
func (r *Reader) Close() {
	r.cl.Close()
	<-r.done
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
