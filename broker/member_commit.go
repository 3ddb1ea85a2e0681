package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TxnOffset is the offset a Member's transaction commits for one partition
// of its group.
type TxnOffset struct {
	Topic     string
	Partition int32
	// At is the offset committed (the next record to read) and the
	// leader epoch of the record before it, -1 when not known.
	At kgo.EpochOffset
	// Metadata is kept with the offset. Default (nil): the member's ID,
	// as the session keeps.
	Metadata *string
	// TopicID names the topic in the request. Default (zero): the ID the
	// session filled in, if it was committing the topic; a request with a
	// topic of no ID names its topics instead (TxnOffsetCommit v5).
	TopicID [16]byte
}

// ErrNotAssigned is wrapped by Commit's error when the member's last sync
// no longer assigns it a partition the transaction commits or carries the
// work of: the transaction aborts, and the partition's next owner does
// that work.
var ErrNotAssigned = errors.New("partition no longer assigned to this member")

// Commit runs one transaction of the member (RunTxn): it writes recs and
// commits exactly offsets, each partition's in place of the position the
// session polled to. The offset commit stays fenced by the group's
// generation and member (KIP-447), and the session still aborts the
// transaction on a revocation: that is what keeps exactly once across
// rebalances.
//
// The fence is the generation, not the partitions: a revocation the
// session did not pass on (see Assignment) would let the transaction
// commit a partition another member took meanwhile. So Commit aborts,
// with an error wrapping ErrNotAssigned, when the last sync did not assign
// the member a partition of offsets or of also (the partitions whose work
// recs carry without moving their offsets, by topic). The check runs after
// recs were written: a sync that took a partition before it aborts the
// transaction, and one after it gives the partition to no one before this
// member rejoins, whose new owner then reads this transaction's records,
// or waits for them.
//
// onAbort is RunTxn's. An AtLeastOnce member has no transactions: Commit
// returns an error.
func (m *Member) Commit(ctx context.Context, recs []*kgo.Record, offsets []TxnOffset, also map[string][]int32,
	onAbort func(first error)) (Txn, error) {
	if m.sess == nil {
		return Txn{}, errors.New("broker: Commit on an at-least-once member: produce and commit offsets with its Client")
	}
	setOffsets := func(req *kmsg.TxnOffsetCommitRequest) error {
		for topic, ps := range also {
			for _, p := range ps {
				if !m.cfg.Assignment.Has(topic, p) {
					return fmt.Errorf("broker: %s/%d: %w", topic, p, ErrNotAssigned)
				}
			}
		}
		for _, o := range offsets {
			if !m.cfg.Assignment.Has(o.Topic, o.Partition) {
				return fmt.Errorf("broker: %s/%d: %w", o.Topic, o.Partition, ErrNotAssigned)
			}
		}
		setTxnOffsets(req, offsets)
		return nil
	}
	return RunTxn(ctx, m.sess, recs, setOffsets, onAbort)
}

// setTxnOffsets makes req commit exactly offsets, in topic and partition
// order, keeping the topic IDs the client filled in where an offset names
// none.
func setTxnOffsets(req *kmsg.TxnOffsetCommitRequest, offsets []TxnOffset) {
	ids := map[string][16]byte{}
	for _, t := range req.Topics {
		ids[t.Topic] = t.TopicID
	}
	sorted := slices.SortedFunc(slices.Values(offsets), func(a, b TxnOffset) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	req.Topics = req.Topics[:0]
	for _, o := range sorted {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != o.Topic {
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic, rt.TopicID = o.Topic, ids[o.Topic]
			req.Topics = append(req.Topics, rt)
		}
		rt := &req.Topics[len(req.Topics)-1]
		if o.TopicID != ([16]byte{}) {
			rt.TopicID = o.TopicID
		}
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = o.Partition, o.At.Offset, o.At.Epoch, o.Metadata
		if rp.Metadata == nil {
			rp.Metadata = &req.MemberID
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
}
