package consumer

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Mux is a Handler that routes each task to the Handler registered for its
// queue, as asynq's ServeMux and net/http's ServeMux route by pattern. A
// task of a queue with no Handler fails with SkipRetry, naming the queue:
// running it again would not find one either.
//
//	mux := consumer.NewMux()
//	mux.Route("emails", consumer.JSON(sendEmail))
//	mux.RouteFunc("receipts", storeReceipt)
//	w, err := consumer.New(..., consumer.Queues("emails", "receipts"), consumer.WithHandler(mux))
type Mux struct {
	mu sync.RWMutex
	m  map[string]Handler
}

var _ Handler = (*Mux)(nil)

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{m: map[string]Handler{}} }

// Route registers h for the tasks of queue. It panics on an empty queue,
// a nil h or a queue registered twice, as net/http's ServeMux does: those
// are programming errors found at start. (Handle is the Mux's own
// Handler method, so registration is Route.)
func (m *Mux) Route(queue string, h Handler) {
	if queue == "" {
		panic("consumer: Mux.Route: empty queue")
	}
	if h == nil {
		panic(fmt.Sprintf("consumer: Mux.Route: nil handler for queue %q", queue))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[queue]; ok {
		panic(fmt.Sprintf("consumer: Mux.Route: queue %q registered twice", queue))
	}
	m.m[queue] = h
}

// RouteFunc registers f for the tasks of queue; see Route.
func (m *Mux) RouteFunc(queue string, f func(ctx context.Context, t *Task) error) {
	if f == nil {
		panic(fmt.Sprintf("consumer: Mux.RouteFunc: nil func for queue %q", queue))
	}
	m.Route(queue, HandlerFunc(f))
}

// Handle runs the Handler registered for t's queue.
func (m *Mux) Handle(ctx context.Context, t *Task) error {
	m.mu.RLock()
	h, ok := m.m[t.Queue]
	m.mu.RUnlock()
	if !ok {
		return SkipRetry(fmt.Errorf("consumer: task %q: no handler for queue %q: register one with Mux.Route (queues handled: %s)", t.ID, t.Queue, m.queues()))
	}
	return h.Handle(ctx, t)
}

func (m *Mux) queues() string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	qs := make([]string, 0, len(m.m))
	for q := range m.m {
		qs = append(qs, q)
	}
	sort.Strings(qs)
	return strings.Join(qs, ", ")
}
