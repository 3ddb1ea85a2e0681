package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/workflow"
)

// TestCharts: tasks count in the minute they finished, the dead ones
// apart, their p99 is of their time from enqueue to finish, the bars
// scale to the largest, whose value names the axis, and the hour's error
// rate counts the dead.
func TestCharts(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 30, 0, time.UTC)
	rec := func(ago, took time.Duration, st onceq.TaskState) onceq.TaskRecord {
		fin := now.Add(-ago)
		return onceq.TaskRecord{State: st, Enqueued: fin.Add(-took), Finished: fin}
	}
	recs := []onceq.TaskRecord{rec(10*time.Second, time.Second, onceq.StateSucceeded), rec(20*time.Second, 3*time.Second, onceq.StateDead),
		rec(5*time.Minute, 500*time.Millisecond, onceq.StateSucceeded), rec(2*time.Hour, time.Second, onceq.StateDead)}
	count, p99, errRate := charts(recs, now)
	last, five := count.Bars[chartMinutes-1], count.Bars[chartMinutes-6]
	if last.Value != "2 tasks, 1 failed" || last.H != 100 || last.FH != 50 || last.FY != last.Y || five.Value != "1 task" || five.H != 50 ||
		five.FH != 0 || count.Bars[0].H != 0 {
		t.Fatalf("counts: last minute %+v, five minutes ago %+v, first %+v", last, five, count.Bars[0])
	}
	if count.Top != "2 tasks" || count.Mid != "1 task" || last.Y != chartTop || last.X != chartLeft+(chartMinutes-1)*chartBarStep {
		t.Fatalf("axis %q/%q, last bar at %d,%d", count.Top, count.Mid, last.X, last.Y)
	}
	if p99.Bars[chartMinutes-1].Value != "3s" || p99.Bars[chartMinutes-6].Value != "500ms" || last.Label != "12:00" || p99.Top != "3s" {
		t.Fatalf("p99: %+v, %+v, top %q", p99.Bars[chartMinutes-1], p99.Bars[chartMinutes-6], p99.Top)
	}
	if errRate != "33.3% (1 of 3 failed)" {
		t.Fatalf("error rate %q, want the hour's: 1 dead of 3", errRate)
	}
	// An odd largest count rounds the axis up to an even one: its middle
	// is a whole number of tasks.
	if odd, _, _ := charts(recs[:1], now); odd.Top != "2 tasks" || odd.Mid != "1 task" || odd.Bars[chartMinutes-1].H != 50 {
		t.Fatalf("the axis of one task: %q/%q, its bar %d high", odd.Top, odd.Mid, odd.Bars[chartMinutes-1].H)
	}
	if _, _, none := charts(nil, now); none != "none finished" {
		t.Fatalf("error rate of no task: %q", none)
	}
}

// chord is a chord's status with n members, the callback pending; the
// members at failed failed, those at running run, the others succeeded.
func chord(n int, failed, running []int) *workflow.Step {
	s := &workflow.Step{Kind: "chord", State: workflow.StateFailed, Steps: make([]workflow.Step, n),
		Callback: &workflow.Step{Kind: "task", Path: "cb", Queue: "shop.merge", ID: "w/cb", State: workflow.StatePending}}
	for i := range s.Steps {
		st, rec := workflow.StateSucceeded, onceq.StateSucceeded
		switch {
		case slices.Contains(failed, i):
			st, rec = workflow.StateFailed, onceq.StateDead
		case slices.Contains(running, i):
			st, rec = workflow.StateRunning, onceq.StateRetrying
		}
		id := fmt.Sprintf("w/%d", i)
		s.Steps[i] = workflow.Step{Kind: "task", Path: strconv.Itoa(i), State: st, Queue: "shop.render", ID: id,
			Record: &onceq.TaskRecord{ID: id, Queue: "shop.render", State: rec, Attempt: 1}}
	}
	return s
}

// TestStepTreeBounded: a chord of 10,000 members lists 20 of them, the
// failed first, then the running, counts all of them by state, notes the
// rest, and renders as a page of a few kilobytes; groups of groups stop
// at maxRows lines.
func TestStepTreeBounded(t *testing.T) {
	running := make([]int, 100)
	for i := range running {
		running[i] = 5000 + i
	}
	root := chord(10_000, []int{9500, 9000}, running)
	tr := stepTree{sees: func(string) bool { return true }}
	tr.add(root, "", 0)
	var got []string
	for _, r := range tr.rows {
		if r.Step == nil {
			got = append(got, "note: "+r.Note)
			continue
		}
		got = append(got, r.Label+" "+r.Step.Kind+" "+r.Step.ID+" "+string(r.Step.State)+" "+r.Summary)
	}
	want := []string{" chord  failed 10000 members: 2 failed, 100 running, 9898 succeeded", "9000 task w/9000 failed ", "9500 task w/9500 failed "}
	for i := range 18 {
		want = append(want, fmt.Sprintf("%d task w/%d running ", 5000+i, 5000+i))
	}
	want = append(want, "note: 9980 more members not listed: the failed and running ones come first (onceq workflow get lists every one)",
		"callback task w/cb pending ")
	if !slices.Equal(got, want) {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if tr.cut != 0 || !tr.rows[1].Link || tr.rows[len(tr.rows)-1].Link {
		t.Fatalf("cut %d; links: failed member %v, the callback without a record %v", tr.cut, tr.rows[1].Link, tr.rows[len(tr.rows)-1].Link)
	}

	var b bytes.Buffer
	st := workflow.Status{ID: "w", State: workflow.StateFailed, Root: root}
	if err := pages.ExecuteTemplate(&b, "workflow", &page{Data: &workflowView{ID: "w", Status: &st, Rows: tr.rows}}); err != nil {
		t.Fatal(err)
	}
	if rows := strings.Count(b.String(), "<tr"); rows != 1+len(want) || b.Len() > 32<<10 {
		t.Fatalf("the page of a chord of 10,000 members: %d rows, %d bytes", rows, b.Len())
	}

	// 50 groups of 50 chains of 3 tasks: 7,651 steps.
	chain := workflow.Step{Kind: "chain", State: workflow.StateSucceeded, Steps: make([]workflow.Step, 3)}
	for i := range chain.Steps {
		chain.Steps[i] = workflow.Step{Kind: "task", State: workflow.StateSucceeded}
	}
	group := workflow.Step{Kind: "group", State: workflow.StateSucceeded, Steps: slices.Repeat([]workflow.Step{chain}, 50)}
	tr = stepTree{sees: func(string) bool { return true }}
	tr.add(&workflow.Step{Kind: "group", State: workflow.StateSucceeded, Steps: slices.Repeat([]workflow.Step{group}, 50)}, "", 0)
	if len(tr.rows) != maxRows || tr.cut == 0 {
		t.Fatalf("groups of groups: %d rows, %d steps cut; want %d rows and a cut", len(tr.rows), tr.cut, maxRows)
	}
}

// TestStripOf: a namespace's token sees its queues named as its API names
// them, on the server's lane or in topics of their own; an operator's
// token sees whole names.
func TestStripOf(t *testing.T) {
	for _, tc := range []struct {
		lane, ns, queue, want string
	}{
		{"serve", "shop", "serve/shop.emails", "emails"},
		{"", "shop", "shop.emails", "emails"},
		{"serve", auth.AllNamespaces, "serve/shop.emails", "serve/shop.emails"},
		{"", "shop", "shopping.emails", "shopping.emails"},
	} {
		c := &Console{lane: tc.lane}
		if got := shown(c.stripOf(auth.Token{Namespace: tc.ns}), tc.queue); got != tc.want {
			t.Errorf("lane %q, namespace %q: %s shown as %q, want %q", tc.lane, tc.ns, tc.queue, got, tc.want)
		}
	}
}

// TestFindTaskError: a look for a task that ran out of time says so in
// words, with its bound; other errors stay as they are.
func TestFindTaskError(t *testing.T) {
	if got := findTaskError(fmt.Errorf("reading: %w", context.DeadlineExceeded)).Error(); !strings.HasPrefix(got, "not found within 3s:") ||
		strings.Contains(got, "deadline") {
		t.Fatalf("a time-out reads %q", got)
	}
	if err := errors.New("the task's record is gone from the queue"); findTaskError(err) != err {
		t.Fatal("another error changed")
	}
}
