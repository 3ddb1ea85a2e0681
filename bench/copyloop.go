package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// CopyLoop is franz-go's own exactly-once copy loop, its
// GroupTransactSession example: poll, produce each record to topic to,
// end the transaction with the offsets. It copies n records from topic
// from as consumer group group, and returns the time from the first
// records polled to the commit of the last. progress, if not nil, is
// called with the records copied after every commit.
//
// It is the baseline of the process scenario and of the worker
// benchmarks: the least an exactly-once consume-transform-produce loop
// costs on Kafka, without per-task state, deduplication or retries.
func CopyLoop(ctx context.Context, conn broker.Conn, from, to, group string, n int, progress func(copied int)) (time.Duration, error) {
	opts, err := conn.Opts()
	if err != nil {
		return 0, err
	}
	sess, err := kgo.NewGroupTransactSession(append(opts,
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(from), kgo.TransactionalID(group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DefaultProduceTopic(to))...)
	if err != nil {
		return 0, fmt.Errorf("bench: copy loop: %w", err)
	}
	defer sess.Close()
	var start time.Time
	copied := 0
	for copied < n {
		fs := sess.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if start.IsZero() && fs.NumRecords() > 0 {
			start = time.Now()
		}
		if err := sess.Begin(); err != nil {
			return 0, fmt.Errorf("bench: copy loop: %w", err)
		}
		var batch int
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers}, nil)
			batch++
		})
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			return 0, fmt.Errorf("bench: copy loop: %w", err)
		}
		if committed {
			copied += batch
			if progress != nil {
				progress(copied)
			}
		}
	}
	return time.Since(start), nil
}
