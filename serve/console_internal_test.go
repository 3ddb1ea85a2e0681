package serve

import (
	"testing"
	"time"

	"github.com/onceq/onceq"
)

// TestCharts: tasks count in the minute they finished, their p99 is of
// their time from enqueue to finish, and the bars scale to the largest.
func TestCharts(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 30, 0, time.UTC)
	rec := func(ago, took time.Duration) onceq.TaskRecord {
		fin := now.Add(-ago)
		return onceq.TaskRecord{Enqueued: fin.Add(-took), Finished: fin}
	}
	recs := []onceq.TaskRecord{rec(10*time.Second, time.Second), rec(20*time.Second, 3*time.Second),
		rec(5*time.Minute, 500*time.Millisecond), rec(2*time.Hour, time.Second)}
	count, p99 := charts(recs, now)
	last, five := count[chartMinutes-1], count[chartMinutes-6]
	if last.Value != "2 tasks" || last.H != 100 || five.Value != "1 tasks" || five.H != 50 || count[0].H != 0 {
		t.Fatalf("counts: last minute %+v, five minutes ago %+v, first %+v", last, five, count[0])
	}
	if p99[chartMinutes-1].Value != "3s" || p99[chartMinutes-6].Value != "500ms" || last.Label != "12:00" {
		t.Fatalf("p99: %+v, %+v", p99[chartMinutes-1], p99[chartMinutes-6])
	}
}
