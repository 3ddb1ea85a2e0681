package producer

import (
	"sync"
	"sync/atomic"
	"time"
)

// Timing of the shared clock.
const (
	// clockTick is how often the shared clock reads the system clock.
	clockTick = time.Millisecond
	// clockIdleTicks is how many ticks without a reader stop the shared
	// clock: a producer that submits nothing costs nothing.
	clockIdleTicks = 100
)

// clock is a millisecond clock that a producer's submissions share. A
// plain task needs the time at millisecond precision only (the wire
// format's), for its enqueue time, its ID and its record's timestamp, and
// reading the system clock was the largest single cost SubmitAsync added
// to franz-go's own (43ns on a 2-vCPU VM, against a few for an atomic
// load). A goroutine reads the system clock every clockTick while
// submissions read the shared clock, and stops after clockIdleTicks
// without one; a submission that finds it stopped reads the system clock
// itself and starts it again.
//
// The shared clock is never ahead of the system clock. It is behind by up
// to a tick, or more when the machine is busy and the goroutine runs late,
// so it serves only where being behind is harmless: an enqueue time, an
// ID's time or a record's timestamp a little early. A task with a Due or
// a Delay reads the system clock instead (see Producer.now): a Due
// computed from a late clock and a Delay would be early.
type clock struct {
	ms   atomic.Int64 // unix milliseconds at the last tick; 0: stopped
	idle atomic.Bool  // no reader since the last tick

	mu     sync.Mutex // orders starting with stopping
	closed bool
	done   chan struct{} // closed by close
}

func newClock() *clock { return &clock{done: make(chan struct{})} }

// now returns the shared clock's time, starting it if it is stopped.
func (c *clock) now() time.Time {
	ms := c.ms.Load()
	if ms == 0 {
		return c.start()
	}
	if c.idle.Load() { // a load, and a store once a tick: no cache line bouncing per read
		c.idle.Store(false)
	}
	return time.UnixMilli(ms)
}

// start reads the system clock and starts the ticking goroutine unless it
// runs or the clock is closed.
func (c *clock) start() time.Time {
	now := time.Now()
	ms := now.UnixMilli()
	c.mu.Lock()
	if c.ms.Load() == 0 && !c.closed && ms > 0 {
		c.ms.Store(ms)
		c.idle.Store(false)
		go c.tick()
	}
	c.mu.Unlock()
	return now
}

// tick reads the system clock every clockTick until the clock is idle for
// clockIdleTicks or closed.
func (c *clock) tick() {
	t := time.NewTicker(clockTick)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-t.C:
		case <-c.done:
		}
		if c.idle.Swap(true) {
			idle++
		} else {
			idle = 0
		}
		if idle >= clockIdleTicks || c.isClosed() {
			c.mu.Lock()
			c.ms.Store(0) // under mu: a reader that sees 0 starts a new goroutine after this one stopped
			c.mu.Unlock()
			return
		}
		c.ms.Store(time.Now().UnixMilli())
	}
}

func (c *clock) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// close stops the ticking goroutine for good; now then reads the system
// clock every time.
func (c *clock) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
}
