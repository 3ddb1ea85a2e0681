package producer

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// BenchmarkSubmitAsync measures asynchronous submission of 100-byte tasks
// to an 8-partition queue on the embedded broker, side by side with raw
// franz-go producing the same records (same client options, same broker).
// The ways run in alternating rounds, so that load from elsewhere on the
// machine falls on all of them alike:
//
//   - raw: franz-go producing records with the key, value and headers of
//     a task (onceq-id, onceq-enqueued), built in the loop;
//   - raw-records: the same, and each task's pending record, the JSON
//     line the producer writes (Records), batched recordsBatch to a Kafka
//     record: what the producer writes, by hand;
//   - tasks: SubmitAsync of tasks carrying the same IDs (validation,
//     resolution, routing, admission, metrics, the record and its pending
//     record);
//   - many: SubmitMany of the same tasks, manyBatch to a call, as a caller
//     producing in bulk submits them;
//   - bare: SubmitAsync of a producer with Records(false), which writes
//     what raw writes;
//   - assigned: SubmitAsync of tasks without IDs (the producer assigns a
//     UUIDv7 to each).
//
// It reports records or tasks per second for each, the ratios of the
// others to raw and of the producer's to raw-records (.../rawrec), and
// each way's process CPU time per task (cpu-ns/...):
// the embedded broker and the client's goroutines included, and moved less
// than the rates by other load on a shared machine. Run:
//
//	go test ./producer -run '^$' -bench SubmitAsync -benchtime 2000000x -count 3
func BenchmarkSubmitAsync(b *testing.B) {
	const (
		queue     = "bench"
		round     = 100_000
		idCount   = 1 << 16
		manyBatch = 1000
		// recordsBatch is the tasks of one batch of pending records that
		// raw-records writes: about what the producer's batches hold at
		// full speed.
		recordsBatch = 2000
	)
	records := broker.RecordsTopic(queue)
	_, conn := testutil.StartBroker(b, "")
	testutil.CreateTopic(b, conn, queue, 8)
	p, err := New(Conn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	bare, err := New(Conn(conn), Records(false))
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
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
	onMany := func(_ int, _ Receipt, err error) { onRecord(nil, err) }
	// Warm up: topic lookups, connections, producer IDs.
	if _, err := p.Submit(ctx, onceq.Task{Queue: queue, Payload: payload}); err != nil {
		b.Fatal(err)
	}
	if _, err := bare.Submit(ctx, onceq.Task{Queue: queue, Payload: payload}); err != nil {
		b.Fatal(err)
	}
	if err := raw.ProduceSync(ctx, &kgo.Record{Topic: queue, Value: payload}).FirstErr(); err != nil {
		b.Fatal(err)
	}

	type way struct {
		name          string
		produce       func(done, n int) // the tasks done to done+n-1
		flush         func(context.Context) error
		wall, cpuTime time.Duration
	}
	batch := make([]onceq.Task, 0, manyBatch)
	ways := []*way{
		{name: "raw", flush: raw.Flush, produce: func(done, n int) {
			for i := done; i < done+n; i++ {
				id := ids[i%idCount]
				enq := strconv.AppendInt(nil, time.Now().UnixMilli(), 10)
				raw.Produce(ctx, &kgo.Record{Topic: queue, Key: []byte(id), Value: payload, Headers: []kgo.RecordHeader{
					{Key: onceq.HeaderID, Value: []byte(id)}, {Key: onceq.HeaderEnqueued, Value: enq},
				}}, onRecord)
			}
		}},
		{name: "raw-records", flush: raw.Flush, produce: func(done, n int) {
			var lines []byte
			for i := done; i < done+n; i++ {
				id := ids[i%idCount]
				now := time.Now()
				enq := strconv.AppendInt(nil, now.UnixMilli(), 10)
				key := []byte(id)
				raw.Produce(ctx, &kgo.Record{Topic: queue, Key: key, Value: payload, Headers: []kgo.RecordHeader{
					{Key: onceq.HeaderID, Value: []byte(id)}, {Key: onceq.HeaderEnqueued, Value: enq},
				}}, onRecord)
				tr := onceq.TaskRecord{ID: id, Queue: queue, State: onceq.StatePending, Enqueued: now, Partition: broker.KeyPartition(key, 8)}
				lines = append(tr.AppendJSON(lines), '\n')
				if (i-done)%recordsBatch == recordsBatch-1 || i == done+n-1 {
					raw.Produce(ctx, &kgo.Record{Topic: records, Value: lines}, onRecord)
					lines = nil
				}
			}
		}},
		{name: "tasks", flush: p.Flush, produce: func(done, n int) {
			for i := done; i < done+n; i++ {
				p.SubmitAsync(ctx, onceq.Task{Queue: queue, ID: ids[i%idCount], Payload: payload}, onTask)
			}
		}},
		{name: "many", flush: p.Flush, produce: func(done, n int) {
			for i := done; i < done+n; {
				batch = batch[:0]
				for ; i < done+n && len(batch) < manyBatch; i++ {
					batch = append(batch, onceq.Task{Queue: queue, ID: ids[i%idCount], Payload: payload})
				}
				p.SubmitMany(ctx, batch, onMany)
			}
		}},
		{name: "bare", flush: bare.Flush, produce: func(done, n int) {
			for i := done; i < done+n; i++ {
				bare.SubmitAsync(ctx, onceq.Task{Queue: queue, ID: ids[i%idCount], Payload: payload}, onTask)
			}
		}},
		{name: "assigned", flush: p.Flush, produce: func(done, n int) {
			for i := done; i < done+n; i++ {
				p.SubmitAsync(ctx, onceq.Task{Queue: queue, Payload: payload}, onTask)
			}
		}},
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		for _, w := range ways {
			cpu0, start := processCPU(), time.Now()
			w.produce(done, n)
			if err := w.flush(ctx); err != nil {
				b.Fatal(err)
			}
			w.wall += time.Since(start)
			w.cpuTime += processCPU() - cpu0
		}
	}
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d records failed, the first with: %v", n, firstErr.Load())
	}
	perTask := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	for _, w := range ways {
		b.ReportMetric(float64(b.N)/w.wall.Seconds(), w.name+"/s")
		b.ReportMetric(perTask(w.cpuTime), "cpu-ns/"+w.name)
		if w != ways[0] {
			b.ReportMetric(ways[0].wall.Seconds()/w.wall.Seconds(), w.name+"/raw")
		}
		if w != ways[0] && w != ways[1] {
			b.ReportMetric(ways[1].wall.Seconds()/w.wall.Seconds(), w.name+"/rawrec")
		}
	}
	b.ReportMetric(perTask(ways[2].wall), "ns/op")
}

// processCPU is the CPU time the process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
