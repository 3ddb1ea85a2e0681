package demo

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/handlers"
)

// The demo's queues, group and header.
const (
	Queue     = "demo-orders"
	Out       = "demo-done"
	Group     = "demo"
	DueHeader = "demo-due" // the due time, kept in the output to check "never early"
)

// Mix is how many tasks of each kind the demo submits.
type Mix struct {
	// Immediate tasks are due at once; Duplicates of them are submitted
	// a second time with the same ID.
	Immediate, Duplicates int
	// Delayed tasks are due between 1s and MaxDelay.
	Delayed  int
	MaxDelay time.Duration
	// Flaky tasks fail twice, then succeed; Doomed ones always fail and
	// end in the dead letters.
	Flaky, Doomed int
}

// Plan is the tasks of a Mix and what must become of them.
type Plan struct {
	Mix Mix
	// Tasks in the order to submit them.
	Tasks []onceq.Task
	// OK are the IDs that must end in Out once each, Dead the ones that
	// must end in the dead letters once each.
	OK, Dead []string
}

// NewPlan builds the tasks of mix, the delayed ones due from now on.
func NewPlan(mix Mix, now time.Time) *Plan {
	p := &Plan{Mix: mix}
	add := func(t onceq.Task) { p.Tasks = append(p.Tasks, t) }
	for i := 0; i < mix.Immediate; i++ {
		id := fmt.Sprintf("order-%d", i)
		p.OK = append(p.OK, id)
		add(onceq.Task{ID: id, Queue: Queue, Payload: []byte(`{"order":` + strconv.Itoa(i) + `}`)})
	}
	for i := 0; i < mix.Delayed; i++ {
		id := fmt.Sprintf("reminder-%d", i)
		due := now.Add(time.Second + time.Duration(i)*(mix.MaxDelay-time.Second)/time.Duration(max(mix.Delayed, 1)))
		p.OK = append(p.OK, id)
		add(onceq.Task{ID: id, Queue: Queue, Due: due, Headers: []onceq.Header{{Key: DueHeader, Value: []byte(strconv.FormatInt(due.UnixMilli(), 10))}}})
	}
	for i := 0; i < mix.Duplicates; i++ {
		add(onceq.Task{ID: fmt.Sprintf("order-%d", i*max(mix.Immediate/max(mix.Duplicates, 1), 1)), Queue: Queue, Payload: []byte("again")})
	}
	for i := 0; i < mix.Flaky; i++ {
		id := fmt.Sprintf("flaky-%d", i)
		p.OK = append(p.OK, id)
		add(onceq.Task{ID: id, Queue: Queue, Headers: []onceq.Header{{Key: handlers.FailHeader, Value: []byte("2")}}})
	}
	for i := 0; i < mix.Doomed; i++ {
		id := fmt.Sprintf("doomed-%d", i)
		p.Dead = append(p.Dead, id)
		add(onceq.Task{ID: id, Queue: Queue, Headers: []onceq.Header{{Key: handlers.FailHeader, Value: []byte("always")}}})
	}
	return p
}

// Check is the outcome of one check: whether it held, and what it found.
type Check struct {
	OK   bool
	Text string
}

func check(ok bool, format string, args ...any) Check {
	return Check{OK: ok, Text: fmt.Sprintf(format, args...)}
}

// CheckOutputs checks the records of Out: executed once (every OK ID
// once, every run counter 1), never early (no delayed task started before
// its due time) and retried (every flaky task succeeded). A record that
// does not decode is a failed check of its own.
func (p *Plan) CheckOutputs(outs []*kgo.Record) []Check {
	var checks []Check
	seen := map[string]int{}
	var early int
	var late []time.Duration
	runsAbove1 := 0
	for _, r := range outs {
		t, err := onceq.FromRecord(r)
		if err != nil {
			checks = append(checks, check(false, "decoding an output: %v", err))
			continue
		}
		seen[t.ID]++
		var due, started int64
		for _, h := range t.Headers {
			switch h.Key {
			case DueHeader:
				due, _ = strconv.ParseInt(string(h.Value), 10, 64)
			case handlers.StartedHeader:
				started, _ = strconv.ParseInt(string(h.Value), 10, 64)
			case handlers.RunsHeader:
				if string(h.Value) != "1" {
					runsAbove1++
				}
			}
		}
		if due > 0 {
			if lag := time.Duration(started-due) * time.Millisecond; started < due {
				early++
			} else {
				late = append(late, lag)
			}
		}
	}
	missing, dups := 0, 0
	for _, id := range p.OK {
		switch seen[id] {
		case 0:
			missing++
		case 1:
		default:
			dups++
		}
	}
	mix := p.Mix
	checks = append(checks, check(missing == 0 && dups == 0 && len(seen) == len(p.OK) && runsAbove1 == 0,
		"executed once: %d distinct task IDs in %s, %d duplicated, %d missing, %d per-ID run counters above 1 (%d resubmitted duplicates skipped)",
		len(seen), Out, dups, missing, runsAbove1, mix.Duplicates))
	if mix.Delayed > 0 {
		slices.Sort(late)
		checks = append(checks, check(early == 0 && len(late) == mix.Delayed,
			"never early: %d delayed tasks, %d started before their due time; lateness (start - due) %s", len(late)+early, early, LatenessSummary(late)))
	}
	if mix.Flaky > 0 {
		n := 0
		for id := range seen {
			if strings.HasPrefix(id, "flaky-") {
				n++
			}
		}
		checks = append(checks, check(n == mix.Flaky, "retried: %d of %d tasks failed twice, then succeeded on their third attempt", n, mix.Flaky))
	}
	return checks
}

// CheckDeadLetters checks the records of Queue's dead-letter topic: every
// Dead ID there once, and nothing else.
func (p *Plan) CheckDeadLetters(dls []*kgo.Record) Check {
	reasons := map[string]int{}
	deadSeen := map[string]int{}
	var sample string
	for _, r := range dls {
		t, err := onceq.FromRecord(r)
		if err != nil {
			continue
		}
		deadSeen[t.ID]++
		reason, _, _ := strings.Cut(t.LastError, ":")
		reasons[reason]++
		sample = t.LastError
	}
	okDead := len(dls) == len(p.Dead)
	for _, id := range p.Dead {
		okDead = okDead && deadSeen[id] == 1
	}
	return check(okDead, "dead letters: %d in %s (want %d), by reason %v; e.g. %q", len(dls), broker.DLQTopic(Queue), len(p.Dead), reasons, sample)
}

// LatenessSummary writes the p50, p99 and max of sorted lateness, or
// "n/a" when there is none.
func LatenessSummary(late []time.Duration) string {
	if len(late) == 0 {
		return "n/a"
	}
	q := func(f float64) time.Duration { return late[int(f*float64(len(late)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v, p99 %v, max %v", q(0.5), q(0.99), late[len(late)-1].Round(time.Millisecond))
}
