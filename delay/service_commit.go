package delay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dlq"
)

// move is one partition's share of a transaction.
type move struct {
	p       *part
	entries []*entry
	outs    []output
	to      cursor
}

// output is where a released record goes.
type output struct {
	rec   *kgo.Record
	to    string    // metric label: a bucket name, "queue" or "dlq"
	due   time.Time // set for the queue
	queue bool
}

// commit moves every released record in one transaction: each goes to its
// queue or next bucket, and each partition that moved records commits its
// offset and cursor. An aborted transaction (a rebalance) drops everything
// read since the last commit; the partitions are read again from their
// committed offsets.
func (s *Service) commit(ctx context.Context) error {
	now := time.Now()
	nowMS := now.UnixMilli()
	var moves []*move
	n := 0
	for _, p := range s.view {
		if !p.committable(nowMS) {
			continue
		}
		if es := p.due(nowMS, nil); len(es) > 0 {
			moves = append(moves, &move{p: p, entries: es})
			n += len(es)
		}
	}
	if n == 0 {
		return nil
	}
	s.held -= n
	s.lastCommit = now
	// The transaction's time is now: a record goes to its queue only if
	// it is due by now, and the transaction becomes visible after now.
	for _, mv := range moves {
		mv.outs = make([]output, 0, len(mv.entries))
		for _, e := range mv.entries {
			o, err := s.route(ctx, e.rec, now)
			if err != nil {
				// The brokers could not say whether a topic exists:
				// read again and retry in a second.
				s.cfg.log.Warn("looking up a topic failed; retrying", "err", err)
				s.resetAll()
				s.lastCommit = now.Add(time.Second)
				return nil
			}
			mv.outs = append(mv.outs, o)
		}
		mv.to = cursor{Offset: mv.p.firstUnmoved(), High: mv.p.next, Time: nowMS, Smallest: mv.p.smallest.Milliseconds()}
	}

	for _, mv := range moves {
		if _, ok := s.topicIDs[mv.p.topic]; !ok {
			// A bucket topic created since the service started.
			if err := s.lookupTopicIDs(ctx); err != nil {
				s.cfg.log.Warn("looking up a bucket topic failed; retrying", "err", err)
				s.resetAll()
				s.lastCommit = now.Add(time.Second)
				return nil
			}
			break
		}
	}
	recs := make([]*kgo.Record, 0, n)
	for _, mv := range moves {
		for _, o := range mv.outs {
			recs = append(recs, o.rec)
		}
	}
	recs = broker.AppendWakeUps(recs)
	t, err := s.member.Commit(ctx, recs, s.offsets(moves), nil, func(first error) {
		s.cfg.log.Warn("aborting a transaction: writing a moved record failed; its records move again", "err", first)
	})
	done := time.Now()
	s.m.commit.Observe(done.Sub(now).Seconds())
	if gone, ok := errors.AsType[*broker.NotAssignedError](err); ok {
		s.lost(gone.Partitions, moves)
	} else if err != nil {
		return fmt.Errorf("delay: moving records: %w", err)
	}
	if !t.Committed {
		s.m.aborts.Inc()
		s.cfg.log.Info("transaction aborted (group rebalanced or a write failed): its records move again", "records", n)
		s.resetAll()
		return nil
	}
	for _, mv := range moves {
		mv.p.committed = mv.to
		if mv.to.High == mv.to.Offset && mv.p.smallest != s.smallest {
			// Nothing above the offset is claimed: the ladder's smallest
			// bucket applies from here on.
			mv.p.smallest = s.smallest
		}
		for _, o := range mv.outs {
			s.m.moved(mv.p.label, o.to)
			if o.queue {
				s.m.lateness.Observe(max(0, done.Sub(o.due).Seconds()))
			}
		}
	}
	s.m.held.Set(float64(s.held))
	return nil
}

// lost lets go of the partitions of gone, which a commit of moves found
// given to others without a revoke callback. A partition the service holds
// in a part other than the move's was assigned to it again since, its
// revocation unheard (kgo's transact session passes on one revocation
// between two commits): that part is the new assignment's and stays.
func (s *Service) lost(gone map[string][]int32, moves []*move) {
	released := s.release(gone, func(old *part) bool {
		return slices.ContainsFunc(moves, func(mv *move) bool { return mv.p == old })
	})
	s.cfg.log.Info("partitions given away without a revoke callback: released", "partitions", released, "reported", gone)
}

// offsets are the offsets of the transaction's offset commit: the member
// would commit what was polled; the service commits each moving
// partition's first record not moved, with its cursor as metadata, and
// nothing for the other partitions. A sync that took a moving partition
// from the service since the moves were read aborts them: the partition's
// next owner moves them (see broker.Member.Commit).
func (s *Service) offsets(moves []*move) []broker.TxnOffset {
	offsets := make([]broker.TxnOffset, len(moves))
	for i, mv := range moves {
		meta := mv.to.encode()
		offsets[i] = broker.TxnOffset{Topic: mv.p.topic, Partition: mv.p.partition, At: kgo.EpochOffset{Epoch: -1, Offset: mv.to.Offset},
			Metadata: &meta, TopicID: s.topicIDs[mv.p.topic]}
	}
	return offsets
}

// resetAll drops everything read since the last commit and rewinds every
// partition to its committed offset.
func (s *Service) resetAll() {
	to := map[string]map[int32]kgo.EpochOffset{}
	resume := map[string][]int32{}
	for k, p := range s.view {
		if !p.loaded {
			continue
		}
		if p.stopped {
			resume[k.topic] = append(resume[k.topic], k.partition)
		}
		p.reset()
		if to[k.topic] == nil {
			to[k.topic] = map[int32]kgo.EpochOffset{}
		}
		// Nothing committed yet: an offset before the log start makes the
		// client start from the beginning, as it did.
		to[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: max(p.committed.Offset, 0)}
	}
	s.held = 0
	s.cl.SetOffsets(to)
	s.cl.ResumeFetchPartitions(resume)
	s.m.held.Set(0)
}

// route decides where a released record goes at now: its queue if it is
// due, else the bucket the planner picks. A hop to a bucket copies the
// record as it is and checks only its onceq-queue and onceq-due headers;
// the hop to the queue decodes it whole. A record that is not a valid
// delayed task goes to a dead-letter topic with the reason: at once when it
// lacks a valid queue or due time, when it is due for any other header.
func (s *Service) route(ctx context.Context, r *kgo.Record, now time.Time) (output, error) {
	queue, qerr := queueHeader(r)
	due, ok := dueMillis(r)
	switch {
	case qerr != "":
		return s.deadLetter(ctx, r, "", dlq.ReasonMalformed, qerr, now)
	case !ok:
		return s.deadLetter(ctx, r, queue, dlq.ReasonMalformed, "no valid onceq-due header: a record in a delay bucket must carry exactly one due time, in unix milliseconds", now)
	}
	hop := s.cfg.planner.Route(now, time.UnixMilli(due))
	if hop.Kind == ToBucket {
		return output{rec: &kgo.Record{Topic: hop.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}, to: bucketLabel(hop.Bucket)}, nil
	}
	// hop.Kind == ToQueue: Route never returns ToTimer, and ToQueue means
	// the due time is at or before now.
	t, err := onceq.FromRecord(r)
	if err != nil {
		return s.deadLetter(ctx, r, queue, dlq.ReasonMalformed, err.Error(), now)
	}
	topic := onceq.QueueTopic(t.Queue) // a lane queue's task goes back to its lane
	if ok, err := s.topics.queue(ctx, topic); err != nil {
		return output{}, err
	} else if !ok {
		return s.deadLetter(ctx, r, t.Queue, dlq.ReasonNoQueue, fmt.Sprintf("queue %q does not exist: create it with 'onceq topics create %s'", t.Queue, topic), now)
	}
	return output{rec: t.Record(topic), to: "queue", due: t.Due, queue: true}, nil
}

// queueHeader returns the record's onceq-queue header, or why it has no
// usable one.
func queueHeader(r *kgo.Record) (queue, problem string) {
	queue, found, err := onceq.PeekQueue(r)
	switch {
	case err != nil:
		return "", err.Error()
	case !found:
		return "", "no onceq-queue header: a record in a delay bucket must name its queue"
	}
	return queue, ""
}

// deadLetter writes r as it is to onceq-dlq-<queue>, or to
// onceq-dlq-<bucket topic> when the queue is unknown, encoded as every
// dead letter is (dlq.EncodeRecord): the reason and text in onceq-error,
// the time in onceq-failed.
func (s *Service) deadLetter(ctx context.Context, r *kgo.Record, queue, reason, text string, now time.Time) (output, error) {
	topic := broker.DLQTopic(r.Topic)
	if queue == "" {
		queue = rawQueue(r)
	}
	if queue != "" && onceq.ValidateTopic(broker.DLQTopic(queue)) == nil {
		topic = broker.DLQTopic(queue)
	}
	if err := s.topics.deadLetters(ctx, topic); err != nil {
		return output{}, fmt.Errorf("delay: dead-letter topic %s: %w", topic, err)
	}
	s.cfg.log.Warn("dead-lettering a record from a delay bucket", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
		"to", topic, "reason", reason, "err", text)
	return output{rec: dlq.EncodeRecord(r, topic, reason, text, now), to: "dlq"}, nil
}

// rawQueue is the record's onceq-queue header if it names a queue with a
// topic of its own.
func rawQueue(r *kgo.Record) string {
	if q, found, err := onceq.PeekQueue(r); found && err == nil && onceq.ValidateTopic(q) == nil {
		return q
	}
	return ""
}
