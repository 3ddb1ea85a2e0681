package limit_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/limit"
	"github.com/onceq/onceq/internal/testutil"
)

// TestClientsKeepTheLimits: three workers' clients, four slots each,
// claim starts of one queue on the embedded broker: the starts keep to
// the rate and to the running limit, measured by the clock of the
// starts themselves, and the limit is used, not only kept.
func TestClientsKeepTheLimits(t *testing.T) {
	_, conn := testutil.StartBroker(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := limit.Limit{Count: 5, Per: 250 * time.Millisecond, Running: 3}
	if err := limit.Set(ctx, conn, "q", l); err != nil {
		t.Fatal(err)
	}
	var clients []*limit.Client
	for range 3 {
		c, err := limit.Open(ctx, conn, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.Limit("q") != l {
			t.Fatalf("limit read as %+v", c.Limit("q"))
		}
		clients = append(clients, c)
	}
	// at is the start a run's claim was admitted at, start and end those
	// the run saw.
	type run struct{ at, start, end time.Time }
	var mu sync.Mutex
	var runs []run
	stop := time.Now().Add(4 * time.Second)
	gone := func() bool { return false }
	var wg sync.WaitGroup
	for _, c := range clients {
		for slot := range 4 {
			wg.Go(func() {
				for i := 0; time.Now().Before(stop); i++ {
					release, at, err := c.Acquire(ctx, "q", 10*time.Second, gone)
					if err != nil {
						t.Error(err)
						return
					}
					start := time.Now()
					if start.Before(at) {
						t.Errorf("Acquire returned at %v, before its claim's start %v", start, at)
					}
					time.Sleep(time.Duration(20+(slot*17+i*13)%60) * time.Millisecond)
					end := time.Now()
					release()
					mu.Lock()
					runs = append(runs, run{at, start, end})
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	// Every claim released: none runs now, for any client.
	for _, c := range clients {
		for deadline := time.Now().Add(10 * time.Second); c.Running("q") != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d running after every release", c.Running("q"))
			}
		}
	}
	// The windows hold over the admitted starts: the runs' own clocks read
	// them a little later, and later still when the machine leaves the
	// test waiting.
	slices.SortFunc(runs, func(a, b run) int { return a.at.Compare(b.at) })
	for i := 0; i+l.Count < len(runs); i++ {
		if d := runs[i+l.Count].at.Sub(runs[i].at); d < l.Per {
			t.Fatalf("%d starts within %v (runs %d to %d)", l.Count+1, d, i, i+l.Count)
		}
	}
	for _, r := range runs {
		at := 0
		for _, o := range runs {
			if !o.start.After(r.start) && o.end.After(r.start) {
				at++
			}
		}
		if at > l.Running {
			t.Fatalf("%d running at %v", at, r.start)
		}
	}
	span := runs[len(runs)-1].start.Sub(runs[0].start)
	want := int(float64(l.Count) * span.Seconds() / (l.Per + limit.Margin).Seconds() * 0.7)
	if len(runs) < want {
		t.Fatalf("%d starts in %v: want at least %d", len(runs), span, want)
	}
	t.Logf("%d starts in %v, rate %s, running %d", len(runs), span, l.Rate(), l.Running)
}
