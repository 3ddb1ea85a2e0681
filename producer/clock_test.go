package producer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
)

// TestClockNeverAhead: the shared clock never reads later than the system
// clock, while it ticks, once it stopped for idleness, and after close,
// when every read is the system clock's.
func TestClockNeverAhead(t *testing.T) {
	c := newClock()
	check := func(when string) {
		t.Helper()
		for range 1000 {
			got := c.now()
			if after := time.Now(); got.After(after) {
				t.Fatalf("%s: the shared clock reads %v, after the system clock's %v", when, got, after)
			}
		}
	}
	check("ticking")
	waitFor(t, "the clock to stop when idle", func() bool { return c.ms.Load() == 0 })
	check("restarted")
	c.close()
	waitFor(t, "the clock to stop when closed", func() bool { return c.ms.Load() == 0 })
	before := time.Now()
	for range 100 {
		if got := c.now(); got.Before(before) {
			t.Fatalf("closed: the clock reads %v, before %v: want the system clock's time", got, before)
		}
	}
	if c.ms.Load() != 0 {
		t.Fatal("a closed clock started ticking again")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStaleClockNeverMakesDueEarly: with the shared clock stuck a minute
// behind (its goroutine descheduled, say), a task's Due computed from its
// Delay is still at least the Delay after the submission, and a task due
// in a second goes to the bucket of a second, not of a minute: tasks with
// a Delay or a Due read the system clock. A plain task takes its enqueue time from the
// stale clock, which is only early.
func TestStaleClockNeverMakesDueEarly(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "jobs", 1)
	p, err := New(Conn(conn))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	stale := time.Now().Add(-time.Minute)
	p.clock = &clock{done: make(chan struct{})} // no goroutine: it never ticks
	p.clock.ms.Store(stale.UnixMilli())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := time.Now()
	delayed, err := p.Submit(ctx, onceq.Task{Queue: "jobs", Delay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	soon, err := p.Submit(ctx, onceq.Task{Queue: "jobs", Due: time.Now().Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := p.Submit(ctx, onceq.Task{Queue: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	if delayed.Topic != "onceq-delay-1s" || soon.Topic != "onceq-delay-1s" || plain.Topic != "jobs" {
		t.Errorf("receipts %+v, %+v, %+v: want the first two in onceq-delay-1s, the bucket of their remaining delay", delayed, soon, plain)
	}
	recs := map[string]*kgo.Record{}
	for _, r := range testutil.ReadSettled(t, conn, 20*time.Second, "jobs", delayed.Topic, soon.Topic) {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		recs[task.ID] = r
	}
	ms := func(id, header string) int64 {
		t.Helper()
		r := recs[id]
		if r == nil {
			t.Fatalf("task %s not written", id)
		}
		for _, h := range r.Headers {
			if h.Key == header {
				n, err := strconv.ParseInt(string(h.Value), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("task %s has no %s", id, header)
		return 0
	}
	if due, earliest := ms(delayed.ID, onceq.HeaderDue), before.Add(2*time.Second).UnixMilli(); due < earliest {
		t.Errorf("a task delayed 2s is due at %d, before %d, 2s after its submission", due, earliest)
	}
	if enq := ms(plain.ID, onceq.HeaderEnqueued); enq != stale.UnixMilli() {
		t.Errorf("a plain task's enqueue time is %d, want the shared clock's %d", enq, stale.UnixMilli())
	}
}
