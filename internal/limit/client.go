package limit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/table"
)

// Lead bounds: a claim names a start this far ahead of its writing, so
// that its holder reads it admitted before then. It follows the time a
// write takes to be read back.
const (
	minLead = 5 * time.Millisecond
	maxLead = time.Second
)

// maxLate is how late after its claim's start a task may start: the rest
// of Margin absorbs what happens between the start and the first effect
// of the handler (a request on its way).
const maxLate = Margin / 2

// check is how often a wait looks whether its caller gave up.
const check = 100 * time.Millisecond

// ErrGone is returned by Acquire when its caller gave up (gone).
var ErrGone = errors.New("limit: the task no longer waits")

// Client follows the limits topic and claims starts on it for one
// worker. It is safe for concurrent use.
type Client struct {
	f        *table.Follower
	cl       *kgo.Client
	log      *slog.Logger
	holder   string
	progress table.Progress
	lead     atomic.Int64 // nanoseconds
	// limits are the queues' limits, replaced whole when one changes:
	// every task of a worker asks, without a lock.
	limits atomic.Pointer[map[string]Limit]

	mu   sync.Mutex
	book *Book
	// stale are the claims read while opening whose Until is an hour
	// past: their holders died; Open forgets them.
	stale   map[string]Record
	opening bool
	changed map[string]chan struct{} // closed when a queue's part changes
	turns   map[string]chan struct{} // one claimant of a queue at a time
}

// Open reads the limits topic (creating it if needed) up to its end as of
// the call, and follows it from then on.
func Open(ctx context.Context, conn broker.Conn, log *slog.Logger) (*Client, error) {
	cl, err := conn.NewClient(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.WithLogger(broker.KgoLogger(log)))
	if err != nil {
		return nil, err
	}
	c := &Client{cl: cl, log: log, holder: rand.Text()[:12], book: NewBook(),
		changed: map[string]chan struct{}{}, turns: map[string]chan struct{}{}, stale: map[string]Record{}, opening: true}
	c.lead.Store(int64(20 * time.Millisecond))
	c.f, err = table.Follow(ctx, conn, Topic, log, c.apply, table.Configs(broker.LimitsSpec().Configs))
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("limits: %w", err)
	}
	c.mu.Lock()
	c.opening = false
	for _, r := range c.stale {
		cl.Produce(context.Background(), ForgetRecord(r.Queue, r.Holder, r.Nonce), nil)
	}
	c.stale = nil
	c.mu.Unlock()
	return c, nil
}

// staleAfter is how long past its Until a claim is forgotten by a worker
// that opens: its holder died without forgetting it.
const staleAfter = time.Hour

// Close stops following the topic.
func (c *Client) Close() {
	c.f.Close()
	c.cl.Close()
}

func (c *Client) apply(rec *kgo.Record) {
	defer c.progress.Applied(rec)
	r, err := Decode(rec.Key, rec.Value)
	if err != nil {
		c.log.Warn("limits record skipped", "offset", rec.Offset, "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opening && r.Holder != "" {
		k := string(rec.Key)
		if r.Claim != nil && time.Since(time.UnixMilli(r.Claim.Until)) > staleAfter {
			c.stale[k] = r
		} else {
			delete(c.stale, k)
		}
	}
	c.book.Apply(r, rec.Timestamp)
	if r.Holder == "" {
		limits := c.book.Limits()
		c.limits.Store(&limits)
	}
	if ch, ok := c.changed[r.Queue]; ok {
		close(ch)
		delete(c.changed, r.Queue)
	}
}

// Limit returns queue's limit. A nil Client has none.
func (c *Client) Limit(queue string) Limit {
	if c == nil {
		return Limit{}
	}
	if m := c.limits.Load(); m != nil {
		return (*m)[queue]
	}
	return Limit{}
}

// Limits returns every queue's limit.
func (c *Client) Limits() map[string]Limit {
	if m := c.limits.Load(); m != nil {
		return maps.Clone(*m)
	}
	return map[string]Limit{}
}

// Running counts the tasks of queue whose claims hold now, across every
// worker: admitted, not released, not past their end.
func (c *Client) Running(queue string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.book.Running(queue, time.Now())
}

// HasPlace reports whether a claim on queue made now would be admitted,
// as far as the client has read the topic: the queue has no limit, or
// its running claims leave a place and its rate a start. Another claim
// may still take the place first.
func (c *Client) HasPlace(queue string) bool {
	if c.Limit(queue).None() {
		return true
	}
	at := time.Now().Add(time.Duration(c.lead.Load()))
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.book.Next(queue, at).After(at)
}

// Sync waits until the client read the topic to its end as of the call.
func (c *Client) Sync(ctx context.Context) error { return c.f.Sync(ctx) }

// Release ends a claim: call it once the handler returned.
type Release func()

// Acquire waits until a task of queue may start in this worker's slot,
// and returns when it starts, with the start its claim was admitted at:
// the windows of the limit hold over those, and Acquire returns no
// earlier than it, and at most maxLate later by its own clock (a process
// that the machine leaves waiting may see its return later still). hold
// is how long the task may run (its time-to-run and grace): past it, the
// claim no longer counts. gone is asked every 100 ms while it waits: true
// gives up, with ErrGone. A queue without a limit returns at once, with a
// Release that does nothing and a zero start.
func (c *Client) Acquire(ctx context.Context, queue string, hold time.Duration, gone func() bool) (Release, time.Time, error) {
	if c.Limit(queue).None() {
		return func() {}, time.Time{}, nil
	}
	if err := c.takeTurn(ctx, queue, gone); err != nil {
		return nil, time.Time{}, err
	}
	defer c.endTurn(queue)
	for {
		if gone() {
			return nil, time.Time{}, ErrGone
		}
		if c.Limit(queue).None() {
			return func() {}, time.Time{}, nil
		}
		// Claim the first start the book allows, once it is near.
		lead := time.Duration(c.lead.Load())
		c.mu.Lock()
		at := c.book.Next(queue, time.Now().Add(lead))
		ch := c.changedLocked(queue)
		c.mu.Unlock()
		if wait := time.Until(at) - lead; wait > 0 {
			if err := c.wait(ctx, min(wait, check), ch, gone); err != nil {
				return nil, time.Time{}, err
			}
			continue
		}
		claim := Claim{Nonce: rand.Text()[:12], At: at.UnixMilli(), Until: at.Add(hold).UnixMilli()}
		sent := time.Now()
		if err := c.progress.Write(ctx, c.cl, ClaimRecord(queue, c.holder, claim)); err != nil {
			return nil, time.Time{}, fmt.Errorf("limits: %w", err)
		}
		c.learn(time.Since(sent))
		c.mu.Lock()
		admitted, _ := c.book.Admitted(queue, c.holder, claim.Nonce)
		c.mu.Unlock()
		if !admitted {
			c.forget(queue, claim.Nonce, 0)
			continue // another claim came first: the book moved
		}
		if err := c.wait(ctx, time.Until(at), nil, gone); err != nil {
			c.withdraw(queue, claim)
			return nil, time.Time{}, err
		}
		if late := time.Since(at); late > maxLate {
			// Read back too late to start within the window's margin:
			// give the place up, and claim a later one further ahead.
			c.withdraw(queue, claim)
			c.lead.Store(min(int64(maxLead), 2*c.lead.Load()))
			continue
		}
		var once sync.Once
		return func() { once.Do(func() { c.release(queue, claim) }) }, time.UnixMilli(claim.At), nil
	}
}

// learn moves the lead toward twice the time a write took to be read
// back.
func (c *Client) learn(rt time.Duration) {
	old := time.Duration(c.lead.Load())
	next := (3*old + 2*rt) / 4
	c.lead.Store(int64(min(maxLead, max(minLead, next))))
}

// withdraw releases a claim whose task did not start: its start leaves
// the windows, for the next claims to take.
func (c *Client) withdraw(queue string, claim Claim) {
	claim.Withdrawn = true
	c.release(queue, claim)
}

// release writes, without waiting, that a claim ended, and forgets it
// once no window reaches its start. A release lost holds the claim's
// place until its Until.
func (c *Client) release(queue string, claim Claim) {
	claim.Released = true
	c.cl.Produce(context.Background(), ClaimRecord(queue, c.holder, claim), func(_ *kgo.Record, err error) {
		if err != nil {
			c.log.Warn("a limit's claim was not released: it holds its place until its time-to-run ends", "queue", queue, "err", err)
		}
	})
	l := c.Limit(queue)
	c.forget(queue, claim.Nonce, time.Until(time.UnixMilli(claim.At))+2*(l.Per+Margin)+time.Second)
}

// forget writes the tombstone of a claim after d. A tombstone lost
// leaves the claim in the topic until a worker starts, which forgets it
// an hour past its Until.
func (c *Client) forget(queue, nonce string, d time.Duration) {
	write := func() {
		c.cl.Produce(context.Background(), ForgetRecord(queue, c.holder, nonce), func(_ *kgo.Record, err error) {
			if err != nil && !errors.Is(err, kgo.ErrClientClosed) {
				c.log.Debug("a limit's claim was not forgotten", "queue", queue, "err", err)
			}
		})
	}
	if d <= 0 {
		write()
		return
	}
	time.AfterFunc(d, write)
}

// changedLocked returns a channel closed when queue's part of the book
// changes.
func (c *Client) changedLocked(queue string) <-chan struct{} {
	ch, ok := c.changed[queue]
	if !ok {
		ch = make(chan struct{})
		c.changed[queue] = ch
	}
	return ch
}

// wait waits for d, or for ch to close, checking gone every 100 ms.
func (c *Client) wait(ctx context.Context, d time.Duration, ch <-chan struct{}, gone func() bool) error {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(min(left, check))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-ch:
			t.Stop()
			return nil
		case <-t.C:
		}
		if gone() {
			return ErrGone
		}
	}
}

// takeTurn waits until no other slot of this worker claims on queue: one
// claimant a queue at a time, so that the slots of one worker do not race
// each other for each place.
func (c *Client) takeTurn(ctx context.Context, queue string, gone func() bool) error {
	c.mu.Lock()
	turn, ok := c.turns[queue]
	if !ok {
		turn = make(chan struct{}, 1)
		c.turns[queue] = turn
	}
	c.mu.Unlock()
	for {
		t := time.NewTimer(check)
		select {
		case turn <- struct{}{}:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if gone() {
			return ErrGone
		}
	}
}

func (c *Client) endTurn(queue string) {
	c.mu.Lock()
	turn := c.turns[queue]
	c.mu.Unlock()
	<-turn
}

// Set writes queue's limit (a Limit of nothing lifts it) and returns once
// the brokers acknowledged it.
func Set(ctx context.Context, conn broker.Conn, queue string, l Limit) error {
	if err := onceq.ValidateAnyQueue(queue); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	if err := table.Ensure(ctx, adm, Topic, table.Configs(broker.LimitsSpec().Configs)); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	cl, err := conn.NewClient(kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, LimitRecord(queue, l)).FirstErr(); err != nil {
		return fmt.Errorf("limits: writing the limit of %s: %w", queue, err)
	}
	return nil
}
