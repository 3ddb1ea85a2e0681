package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// ErrNoTopic is wrapped when a queue's dead-letter topic does not exist:
// none of its tasks was ever dead-lettered.
var ErrNoTopic = errors.New("no dead-letter topic")

// Reader reads dead-letter topics. Create it with NewReader and release it
// with Close. It is safe for concurrent use.
type Reader struct {
	conn broker.Conn
	adm  *broker.Admin
}

// NewReader connects a reader.
func NewReader(conn broker.Conn) (*Reader, error) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	return &Reader{conn: conn, adm: adm}, nil
}

// Close releases the connection.
func (r *Reader) Close() { r.adm.Close() }

// Queues returns the queues that have a dead-letter topic, sorted.
func (r *Reader) Queues(ctx context.Context) ([]string, error) {
	topics, err := r.adm.ListTopics(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	var qs []string
	for _, t := range topics {
		if q, ok := strings.CutPrefix(t, broker.DLQPrefix); ok && q != "" {
			qs = append(qs, q)
		}
	}
	return qs, nil
}

// Read calls fn with every dead letter of queue that a read_committed
// consumer sees, from the start of each partition of onceq-dlq-<queue> to
// its last stable offset when Read is called, in offset order within a
// partition (partitions interleave). Dead letters of transactions still
// open are not waited for. An error from fn stops Read and is returned. A
// missing topic is an error wrapping ErrNoTopic.
func (r *Reader) Read(ctx context.Context, queue string, fn func(Letter) error) error {
	topic := broker.DLQTopic(queue)
	info, err := r.adm.DescribeTopic(ctx, topic)
	if errors.Is(err, broker.ErrTopicNotFound) {
		return fmt.Errorf("dlq: no dead letters for queue %s (topic %s does not exist): %w", queue, topic, ErrNoTopic)
	}
	if err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	starts := map[int32]kgo.Offset{}
	ends := map[int32]int64{} // partitions not read to their end yet
	for _, p := range info.Partitions {
		if p.Stable > p.Start {
			starts[p.Partition] = kgo.NewOffset().At(p.Start)
			ends[p.Partition] = p.Stable
		}
	}
	if len(ends) == 0 {
		return nil
	}
	cl, err := r.conn.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers are delivered so that a partition whose
		// last stable offset follows a marker is seen to be finished.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	defer cl.Close()
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("dlq: reading %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			if ferr == nil && errors.Is(err, kgo.ErrClientClosed) {
				ferr = fmt.Errorf("dlq: reading %s partition %d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			end, ok := ends[rec.Partition]
			if !ok || rec.Offset >= end {
				continue
			}
			if rec.Offset >= end-1 {
				delete(ends, rec.Partition)
			}
			if rec.Attrs.IsControl() {
				continue
			}
			if err := fn(Decode(rec, queue)); err != nil {
				return err
			}
		}
	}
	return nil
}
