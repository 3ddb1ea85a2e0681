package watermill_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"

	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/broker"
)

// BenchmarkWorkerVsWatermill drains pre-loaded queues of 100-byte tasks
// (8 partitions) with onceq's exactly-once worker and a noop handler, over
// tasks with IDs onceq generated and over tasks with IDs a client chose
// (an idempotency key each, which the worker remembers), and with
// Watermill's Kafka subscriber in a consumer group that acknowledges every
// message and does nothing else. The three take turns at going first; run
// -benchtime 3x for every order. ONCEQ_BENCH_BROKERS runs it on a cluster
// (see cluster).
func BenchmarkWorkerVsWatermill(b *testing.B) {
	n := bench.EnvTasks()
	conn, pre := cluster(b)
	generated, keys := pre+"bench", pre+"bench-keys"
	preload(b, conn, generated, n, true)
	preload(b, conn, keys, n, false)
	var onceqTook, keysTook, wmTook time.Duration
	runs := 0
	drain := func(queue, group string, took *time.Duration) {
		d, err := bench.Drain(context.Background(), conn, queue, group, b.TempDir(), n)
		if err != nil {
			b.Fatal(err)
		}
		*took += d
	}
	for i := 0; b.Loop(); i++ {
		drains := []func(){
			func() { drain(generated, fmt.Sprintf("%sonceq-%d", pre, i), &onceqTook) },
			func() { drain(keys, fmt.Sprintf("%sonceq-keys-%d", pre, i), &keysTook) },
			func() { wmTook += drainWatermill(b, conn, generated, fmt.Sprintf("%swatermill-%d", pre, i), n) },
		}
		for j := range drains {
			drains[(i+j)%len(drains)]()
		}
		runs++
	}
	rate := func(d time.Duration) float64 { return float64(n*runs) / d.Seconds() }
	b.ReportMetric(rate(onceqTook), "eos-tasks/s")
	b.ReportMetric(rate(keysTook), "eos-keys-tasks/s")
	b.ReportMetric(rate(wmTook), "watermill-tasks/s")
	b.ReportMetric(rate(onceqTook)/rate(wmTook), "eos/watermill")
	b.ReportMetric(rate(keysTook)/rate(wmTook), "eos-keys/watermill")
}

// preload writes n tasks to a new queue of 8 partitions, with IDs onceq
// generated or a client chose.
func preload(b *testing.B, conn broker.Conn, queue string, n int, generated bool) {
	b.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	ctx := context.Background()
	if err := adm.CreateTopic(ctx, queue, 8, nil); err != nil {
		b.Fatal(err)
	}
	if err := bench.Preload(ctx, conn, queue, n, generated); err != nil {
		b.Fatal(err)
	}
}

// drainWatermill subscribes to queue with Watermill's Kafka subscriber in
// group, acknowledges n messages and returns the time it took, from the
// subscription to the last acknowledgment's commit.
func drainWatermill(b *testing.B, conn broker.Conn, queue, group string, n int) time.Duration {
	b.Helper()
	sc := kafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	// Sarama fails to decode some responses of franz-go's kfake at the
	// newer protocol versions ("invalid byteslice length"); 2.1 works.
	sc.Version = sarama.V2_1_0_0
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               conn.Brokers,
		Unmarshaler:           kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: sc,
		ConsumerGroup:         group,
	}, logger())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	msgs, err := sub.Subscribe(ctx, queue)
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.After(10 * time.Minute)
	for got := 0; got < n; got++ {
		select {
		case m := <-msgs:
			m.Ack()
		case <-deadline:
			b.Fatalf("watermill: %d of %d messages in 10 minutes", got, n)
		}
	}
	wait, stop := context.WithTimeout(ctx, 10*time.Minute)
	defer stop()
	if err := bench.WaitCommitted(wait, conn, group, int64(n)); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if err := sub.Close(); err != nil {
		b.Fatal(err)
	}
	return took
}

// logger is Watermill's logger: none, or with ONCEQ_BENCH_WATERMILL_DEBUG
// set, its debug log on stderr.
func logger() watermill.LoggerAdapter {
	if os.Getenv("ONCEQ_BENCH_WATERMILL_DEBUG") == "" {
		return watermill.NopLogger{}
	}
	return watermill.NewStdLogger(true, false)
}
