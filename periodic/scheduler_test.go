package periodic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestSchedulersCatchUpAndSkip: two schedulers start after every
// scheduler was down for ten days. A daily schedule that catches up gets
// its latest MaxCatchUp missed ticks submitted, each due at its tick with
// its schedule's payload and limits, and its cursor at the latest; one
// that skips gets none. Both schedulers submit every tick: the queue holds
// each tick once or twice (workers run it once).
func TestSchedulersCatchUpAndSkip(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "reports", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, err := Open(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	// Daily at half an hour ago: the missed ticks are whole days away
	// from now, whenever the test runs.
	start := time.Now().UTC()
	at := start.Add(-30 * time.Minute)
	spec := fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour())
	since := start.Add(-10 * 24 * time.Hour)
	catchUp := Schedule{Name: "catchup", Queue: "reports", Cron: spec, Payload: []byte("p"), MaxAttempts: 2, Timeout: 5 * time.Second, Since: since}
	if _, err := store.Add(ctx, catchUp); err != nil {
		t.Fatal(err)
	}
	skip := catchUp
	skip.Name, skip.Missed = "skipper", SkipMissed
	if _, err := store.Add(ctx, skip); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	for range 2 {
		s, err := NewScheduler(Conn(conn), MaxCatchUp(4), Logger(slog.New(slog.NewTextHandler(t.Output(), nil))))
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- s.Run(runCtx) }()
	}
	lastTick := time.Date(at.Year(), at.Month(), at.Day(), at.Hour(), at.Minute(), 0, 0, time.UTC)
	waitFor(t, "the catch-up schedule's cursor at its latest tick", func() bool {
		e, _ := store.Get("catchup", start)
		return e.Last.Equal(lastTick)
	})
	stop()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	var want []string
	for d := 3; d >= 0; d-- {
		want = append(want, TaskID("catchup", lastTick.AddDate(0, 0, -d)))
	}
	seen := map[string]int{}
	for _, r := range testutil.ReadCommitted(t, conn, 10*time.Second, "reports") {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		name, tick, ok := ParseTaskID(task.ID)
		if !ok || name != "catchup" || !task.Due.Equal(tick) || string(task.Payload) != "p" || task.MaxAttempts != 2 ||
			task.Timeout != 5*time.Second || task.GeneratedID {
			t.Fatalf("task %+v: want a tick of catchup, due at its tick, with its payload and limits", task)
		}
		seen[task.ID]++
	}
	var got []string
	for id, n := range seen {
		got = append(got, id)
		if n > 2 {
			t.Errorf("%s submitted %d times by 2 schedulers", id, n)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("ticks submitted %v;\nwant the latest 4 of 10 missed, %v, and none of the schedule that skips", got, want)
	}
	// Every tick is recorded from its submission, pending before any
	// worker ran it.
	recorded := map[string]onceq.TaskState{}
	for _, r := range testutil.ReadCommitted(t, conn, 10*time.Second, broker.RecordsTopic("reports")) {
		trs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			recorded[tr.ID] = tr.State
		}
	}
	for _, id := range want {
		if recorded[id] != onceq.StatePending {
			t.Errorf("tick %s recorded %q, want pending", id, recorded[id])
		}
	}
}

// TestNewSchedulerRefusesBadOptions: every bad option is reported at
// once, naming it, and matches ErrConfig.
func TestNewSchedulerRefusesBadOptions(t *testing.T) {
	_, err := NewScheduler(Lead(0), MaxCatchUp(0), Planner(nil), nil, Conn(broker.Conn{Brokers: []string{"nohostport"}}))
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("err %v; want ErrConfig", err)
	}
	var options []string
	for _, oe := range onceq.Options(err) {
		options = append(options, oe.Option)
	}
	if fmt.Sprint(options) != "[Lead MaxCatchUp Planner Opt]" || !errors.Is(err, broker.ErrConfig) {
		t.Fatalf("refused %v (%v); want Lead, MaxCatchUp, Planner, the nil Opt and the brokers", options, err)
	}
}
