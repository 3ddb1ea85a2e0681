package broker

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

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

// ErrNotAssigned is wrapped by Commit's error when the member no longer
// holds a partition the transaction commits or carries the work of: the
// transaction aborts, and the partition's next owner does that work. The
// error is a *NotAssignedError, which names the partitions.
var ErrNotAssigned = errors.New("partition no longer assigned to this member")

// NotAssignedError names the partitions a Commit found the member no
// longer holds, by topic. Its user lets them go as revoked ones: their
// revocation may have come without a callback (see Commit).
type NotAssignedError struct {
	Partitions map[string][]int32
}

func (e *NotAssignedError) Error() string {
	var parts []string
	for _, topic := range slices.Sorted(maps.Keys(e.Partitions)) {
		for _, p := range e.Partitions[topic] {
			parts = append(parts, topic+"/"+strconv.Itoa(int(p)))
		}
	}
	return "broker: " + strings.Join(parts, ", ") + ": " + ErrNotAssigned.Error()
}

// Is makes errors.Is(err, ErrNotAssigned) hold.
func (e *NotAssignedError) Is(target error) bool { return target == ErrNotAssigned }

// Commit runs one transaction of the member (RunTxn): it writes recs and
// commits exactly offsets, each partition's in place of the position the
// session polled to. The offset commit stays fenced by the group's
// generation and member (KIP-447), and the session still aborts the
// transaction on a revocation: that is what keeps exactly once across
// rebalances.
//
// The fence is the generation (a classic group's) or the member epoch (a
// KIP-848 group's), not the partitions: a revocation the session did not
// pass on would let the transaction commit a partition another member
// took meanwhile. kgo's session passes the first revocation (or loss)
// between two ends of a transaction to the member's callback and drops
// the next ones until End clears its flag; a KIP-848 member also keeps
// its epoch valid after giving a partition up, so the brokers accept the
// commit. So Commit aborts, with a *NotAssignedError, when the member no
// longer holds a partition of offsets or of also (the partitions whose
// work recs carry without moving their offsets, by topic):
//   - ClassicGroup: the last sync did not assign it (see Assignment);
//   - ConsumerGroup: the client, just before the transaction ends, holds
//     no offset of it. kgo forgets a partition's offsets when it gives
//     the partition up, callback or not, and knows those of every
//     partition it has polled records from since it got it, which a
//     partition with work or a moved offset always is.
//
// The classic check runs after recs were written: a sync that took a
// partition before it aborts the transaction, and one after it gives the
// partition to no one before this member rejoins, whose new owner then
// reads this transaction's records, or waits for them. A KIP-848 member
// acknowledges a revocation only after its client forgot the partition's
// offsets: a commit that found them sends its offsets before that
// acknowledgement, so the new owner's fetch of the group's offsets waits
// for this transaction (KIP-447), or under the epoch the revocation made
// stale, which the brokers refuse.
//
// onAbort is RunTxn's. An AtLeastOnce member has no transactions: Commit
// returns an error.
func (m *Member) Commit(ctx context.Context, recs []*kgo.Record, offsets []TxnOffset, also map[string][]int32,
	onAbort func(first error)) (Txn, error) {
	if m.sess == nil {
		return Txn{}, errors.New("broker: Commit on an at-least-once member: produce and commit offsets with its Client")
	}
	var holds func(topic string, p int32) bool
	beforeEnd := func() { holds = m.Holds() }
	setOffsets := func(req *kmsg.TxnOffsetCommitRequest) error {
		var gone map[string][]int32
		check := func(topic string, p int32) {
			if !holds(topic, p) && !slices.Contains(gone[topic], p) {
				if gone == nil {
					gone = map[string][]int32{}
				}
				gone[topic] = append(gone[topic], p)
			}
		}
		for topic, ps := range also {
			for _, p := range ps {
				check(topic, p)
			}
		}
		for _, o := range offsets {
			check(o.Topic, o.Partition)
		}
		if gone != nil {
			for _, ps := range gone {
				slices.Sort(ps)
			}
			return &NotAssignedError{Partitions: gone}
		}
		setTxnOffsets(req, offsets)
		return nil
	}
	return RunTxn(ctx, m.sess, recs, beforeEnd, setOffsets, onAbort)
}

// Holds reports, from one look at the client, whether a Commit would find
// the member holding a partition (see Commit): for a ConsumerGroup member,
// whether its client holds an offset of it, which it does for a partition
// it polled records from, or whose committed offset it fetched, since it
// got it; for a ClassicGroup member, whether the last sync assigned it.
//
// kgo keeps those offsets in two views: CommittedOffsets has the
// partitions the group has a commit for, UncommittedOffsets those polled
// past their commit (or past where consuming started, when the group has
// none). A partition polled from, never committed, is only in the second.
func (m *Member) Holds() func(topic string, p int32) bool {
	if m.cfg.Protocol != ConsumerGroup {
		return m.cfg.Assignment.Has
	}
	committed, polled := m.cl.CommittedOffsets(), m.cl.UncommittedOffsets()
	return func(topic string, p int32) bool {
		_, ok := committed[topic][p]
		if !ok {
			_, ok = polled[topic][p]
		}
		return ok
	}
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
