// Package control changes what onceq's workers do: it cancels tasks and
// workflows, pauses and resumes queues (through the control topic every
// worker follows), and submits tasks only when the read side does not
// know their IDs. What it needs to know first it asks of an
// inspect.Inspector, the read side, which itself writes nothing.
//
//	in, err := inspect.Open(inspect.Conn(conn))
//	if err != nil { ... }
//	ctl := control.New(in)
//	a, err := ctl.Cancel(ctx, "emails", "welcome-42")
//	fmt.Println(a.Describe("emails", "welcome-42"))
package control

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/ctltopic"
)

// A Controller writes cancels, pauses and unique submissions, reading
// through its Inspector. It is safe for concurrent use; one per process
// keeps SubmitUnique from submitting an ID twice at once in that process.
type Controller struct {
	in      *inspect.Inspector
	idLocks [64]sync.Mutex // SubmitUnique's, by the hash of queue and ID
}

// New returns a Controller that reads through in.
func New(in *inspect.Inspector) *Controller { return &Controller{in: in} }

// Inspector is the read side the controller asks.
func (c *Controller) Inspector() *inspect.Inspector { return c.in }

// Pause stops a queue: workers stop fetching it within a second, and start
// none of its tasks until Resume. The pause is kept in the control topic,
// so it holds across restarts; nothing of the queue is lost.
func (c *Controller) Pause(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, true)
}

// Resume lets workers run a paused queue again.
func (c *Controller) Resume(ctx context.Context, queue string) error {
	return c.setPaused(ctx, queue, false)
}

func (c *Controller) setPaused(ctx context.Context, queue string, paused bool) error {
	if err := onceq.ValidateAnyQueue(queue); err != nil {
		return err
	}
	if err := ctltopic.Write(ctx, c.in.Conn(), ctltopic.Entry{Queue: queue, Paused: paused, At: time.Now()}); err != nil {
		return fmt.Errorf("control: pausing or resuming %s: %w", queue, err)
	}
	return nil
}
