package producer

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
)

// BenchmarkSubmitAsync measures asynchronous submission of 100-byte tasks
// to an 8-partition queue on the embedded broker, side by side with raw
// franz-go producing the same records (same client options, same broker).
// The three ways run in alternating rounds, so that load from elsewhere on
// the machine falls on all of them alike:
//
//   - raw: franz-go producing records with the key, value and headers of
//     a task (onceq-id, onceq-enqueued), built in the loop;
//   - tasks: SubmitAsync of tasks carrying the same IDs (validation,
//     resolution, routing, admission, metrics and the record);
//   - assigned: SubmitAsync of tasks without IDs (the producer assigns a
//     UUIDv7 to each).
//
// It reports records or tasks per second for each, and the ratios of tasks
// and assigned to raw. Run:
//
//	go test ./producer -run '^$' -bench SubmitAsync -benchtime 2000000x -count 3
func BenchmarkSubmitAsync(b *testing.B) {
	const (
		queue   = "bench"
		round   = 100_000
		idCount = 1 << 16
	)
	_, conn := testutil.StartBroker(b, "")
	testutil.CreateTopic(b, conn, queue, 8)
	p, err := New(Conn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	raw, err := conn.NewClient(clientOpts(p.cfg)...)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()

	ids := make([]string, idCount)
	for i := range ids {
		ids[i] = fmt.Sprintf("0190b6e4-7d2a-7cc1-9a3e-%012x", i)
	}
	payload := make([]byte, 100)
	ctx := context.Background()
	var failed atomic.Int64
	var firstErr atomic.Value
	onRecord := func(_ *kgo.Record, err error) {
		if err != nil && failed.Add(1) == 1 {
			firstErr.Store(err)
		}
	}
	onTask := func(_ Receipt, err error) { onRecord(nil, err) }
	// Warm up: topic lookups, connections, producer IDs.
	if _, err := p.Submit(ctx, onceq.Task{Queue: queue, Payload: payload}); err != nil {
		b.Fatal(err)
	}
	if err := raw.ProduceSync(ctx, &kgo.Record{Topic: queue, Value: payload}).FirstErr(); err != nil {
		b.Fatal(err)
	}

	timed := func(n int, produce func(i int), flush func(context.Context) error) time.Duration {
		start := time.Now()
		for i := 0; i < n; i++ {
			produce(i)
		}
		if err := flush(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var rawDur, taskDur, assignedDur time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		rawDur += timed(n, func(i int) {
			id := ids[(done+i)%idCount]
			enq := strconv.AppendInt(nil, time.Now().UnixMilli(), 10)
			raw.Produce(ctx, &kgo.Record{Topic: queue, Key: []byte(id), Value: payload, Headers: []kgo.RecordHeader{
				{Key: onceq.HeaderID, Value: []byte(id)}, {Key: onceq.HeaderEnqueued, Value: enq},
			}}, onRecord)
		}, raw.Flush)
		taskDur += timed(n, func(i int) {
			p.SubmitAsync(ctx, onceq.Task{Queue: queue, ID: ids[(done+i)%idCount], Payload: payload}, onTask)
		}, p.Flush)
		assignedDur += timed(n, func(int) {
			p.SubmitAsync(ctx, onceq.Task{Queue: queue, Payload: payload}, onTask)
		}, p.Flush)
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d records failed, the first with: %v", n, firstErr.Load())
	}
	perSec := func(d time.Duration) float64 { return float64(b.N) / d.Seconds() }
	b.ReportMetric(perSec(rawDur), "raw/s")
	b.ReportMetric(perSec(taskDur), "tasks/s")
	b.ReportMetric(perSec(assignedDur), "assigned/s")
	b.ReportMetric(rawDur.Seconds()/taskDur.Seconds(), "tasks/raw")
	b.ReportMetric(rawDur.Seconds()/assignedDur.Seconds(), "assigned/raw")
	b.ReportMetric(float64(taskDur.Nanoseconds())/float64(b.N), "ns/op")
}
