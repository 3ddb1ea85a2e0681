package serve_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/inspect"
)

// benchRetained is the number of retained tasks ONCEQ_BENCH_RETAINED
// asks BenchmarkReadSide to keep in its busy queue's records, or
// 1,000,000.
func benchRetained(b *testing.B) int {
	v := os.Getenv("ONCEQ_BENCH_RETAINED")
	if v == "" {
		return 1_000_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("ONCEQ_BENCH_RETAINED=%q: want a number of tasks (0 for none)", v)
	}
	return n
}

// writeRetained writes n task records of queue, as workers and producers
// would have over the last hours, in batches of JSON lines: of each 20,
// 14 succeeded, 2 dead, 2 scheduled (due within a day), 1 running and 1
// retrying after a failed attempt. It returns the count by state.
func writeRetained(b *testing.B, conn broker.Conn, queue string, n int) map[onceq.TaskState]int64 {
	cl, err := conn.NewClient(kgo.ProducerBatchMaxBytes(4 << 20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	now := time.Now()
	counts := map[onceq.TaskState]int64{}
	const perRecord = 1000
	var batch []*kgo.Record
	for from := 0; from < n; from += perRecord {
		var buf []byte
		for i := from; i < min(from+perRecord, n); i++ {
			at := now.Add(-time.Duration(n-i) * 10 * time.Millisecond)
			r := onceq.TaskRecord{ID: fmt.Sprintf("r-%07d", i), Queue: queue, State: onceq.StateSucceeded, Attempt: 1, Worker: "w-1/bench",
				Enqueued: at.Add(-time.Second), Started: at.Add(-5 * time.Millisecond), Finished: at, Partition: 0, Offset: int64(i)}
			switch i % 20 {
			case 14, 15:
				r.State, r.Reason, r.Error = onceq.StateDead, "failed", "smtp: 550 mailbox unavailable"
			case 16, 17:
				r.State, r.Worker, r.Started, r.Finished, r.Due = onceq.StateScheduled, "", time.Time{}, time.Time{}, now.Add(time.Duration(i)*time.Second/20)
			case 18:
				r.State, r.Finished = onceq.StateRunning, time.Time{}
			case 19:
				r.State, r.Error, r.Due = onceq.StateRetrying, "timeout", now.Add(time.Hour)
			}
			counts[r.State]++
			buf = append(r.AppendJSON(buf), '\n')
		}
		batch = append(batch, &kgo.Record{Topic: broker.RecordsTopic(queue), Value: buf})
		if len(batch) == 50 || from+perRecord >= n {
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return counts
}

// awaitRetained waits until in counts at least want tasks of queue.
func awaitRetained(b *testing.B, in *inspect.Inspector, queue string, want int64) {
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		st, err := in.Stats(ctx, queue)
		var got int64
		for _, c := range st.Tasks {
			got += c
		}
		if err == nil && got >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the view of %s holds %d tasks after 10m (%v), want %d", queue, got, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
