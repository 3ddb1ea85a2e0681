package demo

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/handlers"
)

// output is what the flaky: handler writes for t: t with its run count
// and start time.
func output(t onceq.Task, out string, runs int, started time.Time) *kgo.Record {
	t.Queue, t.Due = out, time.Time{}
	t.Headers = append(append([]onceq.Header{}, t.Headers...),
		onceq.Header{Key: handlers.RunsHeader, Value: []byte(strconv.Itoa(runs))},
		onceq.Header{Key: handlers.StartedHeader, Value: []byte(strconv.FormatInt(started.UnixMilli(), 10))})
	return t.Record(out)
}

// TestChecks: a plan's checks hold when each task ran once on time, and
// name a duplicate, an early start and a missing dead letter.
func TestChecks(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	p := NewPlan(Mix{Immediate: 4, Duplicates: 2, Delayed: 2, MaxDelay: 3 * time.Second, Flaky: 1, Doomed: 1}, NamesFor(""), now)
	if len(p.Tasks) != 10 || len(p.OK) != 7 || len(p.Dead) != 1 {
		t.Fatalf("plan: %d tasks, %d ok, %d dead", len(p.Tasks), len(p.OK), len(p.Dead))
	}
	var outs []*kgo.Record
	seen := map[string]bool{}
	for _, task := range p.Tasks {
		if seen[task.ID] || strings.HasPrefix(task.ID, "doomed-") {
			continue
		}
		seen[task.ID] = true
		started := now
		if task.Due.After(now) {
			started = task.Due
		}
		outs = append(outs, output(task, p.Names.Out, 1, started))
	}
	for _, c := range p.CheckOutputs(outs) {
		if !c.OK {
			t.Errorf("all ran once on time: %s", c.Text)
		}
	}
	early := output(p.Tasks[4], p.Names.Out, 2, now) // reminder-0, due a second later, ran twice
	checks := p.CheckOutputs(append(outs, early))
	if checks[0].OK || !strings.Contains(checks[0].Text, "1 duplicated") || checks[1].OK || !strings.Contains(checks[1].Text, "1 started before") {
		t.Errorf("a duplicate that started early: %+v", checks)
	}
	if c := p.CheckDeadLetters(nil); c.OK || !strings.Contains(c.Text, "0 in onceq-dlq-demo-orders (want 1)") {
		t.Errorf("no dead letters: %+v", c)
	}
}
