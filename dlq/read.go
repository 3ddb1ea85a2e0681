package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
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
//
// The lane queues of a lane share its dead-letter topic (broker.DLQTopic):
// Read passes fn the letters of queue only, skipping those of the
// topic's other lane queues (and, for a lane queue, of its lane as a
// queue of its own), and a lane queue's letters that Remove removed.
func (r *Reader) Read(ctx context.Context, queue string, fn func(Letter) error) error {
	_, _, lane := onceq.SplitLane(queue)
	var floors map[string]map[int32]int64
	if lane {
		var err error
		if floors, err = readFloors(ctx, r.conn, func(q string) bool { return q == queue }); err != nil {
			return err
		}
	}
	return r.readTopic(ctx, queue, func(l Letter) error {
		if _, _, other := onceq.SplitLane(l.Task.Queue); l.Task.Queue != queue && (lane || other) {
			return nil // another queue's, on the same lane
		}
		if below(floors, &l) {
			return nil // removed
		}
		return fn(l)
	})
}

// readTopic is Read without its filter: fn gets every letter of queue's
// dead-letter topic, of whichever queue each names.
func (r *Reader) readTopic(ctx context.Context, queue string, fn func(Letter) error) error {
	topic := broker.DLQTopic(queue)
	var fnErr error
	err := broker.ReadCommitted(ctx, r.conn, topic, func(rec *kgo.Record) error {
		fnErr = fn(Decode(rec, onceq.QueueTopic(queue)))
		return fnErr
	})
	switch {
	case fnErr != nil:
		return fnErr
	case errors.Is(err, broker.ErrTopicNotFound):
		return fmt.Errorf("dlq: no dead letters for queue %s (topic %s does not exist): %w", queue, topic, ErrNoTopic)
	case err != nil:
		return fmt.Errorf("dlq: %w", err)
	}
	return nil
}
