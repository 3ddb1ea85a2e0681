package dlq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// Floors: the dead letters of a lane queue share their lane's dead-letter
// topic with its other queues, so removing some of them (lmstfy's delete
// and respawn through onceq serve) cannot delete records. Remove raises,
// instead, the queue's floor of each partition in broker.DLQFloorsTopic, a
// compacted table keyed by queue and partition; Read passes over the
// queue's letters below its floors. A topic's own queue removes letters
// by deleting its records.

// floorKey is the key of queue's floor on partition p.
func floorKey(queue string, p int32) string { return queue + "\x00" + strconv.Itoa(int(p)) }

// readFloors returns the floors of every lane queue that keep returns
// true for, by queue and partition: none if no floor was ever written.
func readFloors(ctx context.Context, conn broker.Conn, keep func(queue string) bool) (map[string]map[int32]int64, error) {
	out := map[string]map[int32]int64{}
	err := broker.ReadCommitted(ctx, conn, broker.DLQFloorsTopic, func(r *kgo.Record) error {
		q, p, ok := strings.Cut(string(r.Key), "\x00")
		part, err := strconv.ParseInt(p, 10, 32)
		if !ok || err != nil || len(r.Value) != 8 || !keep(q) {
			return nil // not a floor, or another queue's
		}
		if out[q] == nil {
			out[q] = map[int32]int64{}
		}
		// A floor only rises: a lower one written after it (a race of two
		// removals) does not bring letters back.
		out[q][int32(part)] = max(out[q][int32(part)], int64(binary.BigEndian.Uint64(r.Value)))
		return nil
	})
	if errors.Is(err, broker.ErrTopicNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: reading the floors of lane queues: %w", err)
	}
	return out, nil
}

// below says whether l is below its queue's floor of its partition.
func below(floors map[string]map[int32]int64, l *Letter) bool {
	f, ok := floors[l.Task.Queue][l.Partition]
	return ok && l.Offset < f
}

// Remove removes the dead letters of lane queue queue below the offsets of
// ends, by partition of its lane's dead-letter topic: Read, List and
// QueueStats no longer show them. The lane's other queues' letters stay.
// The floors only rise. For a queue of its own topic, delete its records
// instead (kadm's DeleteRecords).
func (r *Reader) Remove(ctx context.Context, queue string, ends map[int32]int64) error {
	if _, _, ok := onceq.SplitLane(queue); !ok {
		return fmt.Errorf("dlq: remove dead letters of %q: not a lane queue: delete the records of its dead-letter topic", queue)
	}
	if err := onceq.ValidateLaneQueue(queue); err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	if len(ends) == 0 {
		return nil
	}
	if _, err := r.adm.EnsureTopics(ctx, []broker.TopicSpec{broker.TableSpec(broker.DLQFloorsTopic)}); err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	cl, err := r.conn.NewClient(kgo.DefaultProduceTopic(broker.DLQFloorsTopic))
	if err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, len(ends))
	for p, end := range ends {
		recs = append(recs, &kgo.Record{Key: []byte(floorKey(queue, p)), Value: binary.BigEndian.AppendUint64(nil, uint64(end))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("dlq: writing the floors of %s: %w", queue, err)
	}
	return nil
}
