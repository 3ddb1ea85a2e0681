package consumer

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// kafkaSide is how the worker consumes and commits: its group member
// (broker.Member), with transactions (exactly-once) or without
// (at-least-once).
type kafkaSide interface {
	poll(ctx context.Context, max int) kgo.Fetches
	// commit writes recs and commits offsets, atomically for the
	// transactional side, for the results of the partitions sources.
	// committed false with a nil error means the commit was aborted (a
	// rebalance, a refused write, a source no longer assigned); refused
	// holds the records the brokers refused as too large, which no retry
	// would take.
	commit(ctx context.Context, recs []*kgo.Record, offsets map[string]map[int32]kgo.EpochOffset, sources []*partState) (committed bool, refused []refusal, err error)
	// pause and resume stop and resume fetching partitions.
	pause(parts map[string][]int32)
	resume(parts map[string][]int32)
	// pauseQueue stops or resumes fetching a queue (a pause from the
	// control topic), apart from the partitions pause stops.
	pauseQueue(queue string, paused bool)
	// refreshMetadata asks for the brokers' topics now: a new queue that
	// matches a pattern.
	refreshMetadata()
	// rejoin has the member join its group again now (Worker.Rejoin).
	rejoin()
	// holds reports, from one look, whether a commit would find the
	// member holding a partition (broker.Member.Holds).
	holds() func(topic string, p int32) bool
	leave(ctx context.Context)
	close()
}

// patternRefresh is how often a worker of patterns looks for new queues
// that match them, at most.
const patternRefresh = 10 * time.Second

// The worker's fetch limits (see newKafkaSide).
const (
	fetchMaxBytes          = 1 << 20
	fetchMaxPartitionBytes = 256 << 10
	fetchMaxWait           = 10 * time.Millisecond
)

// newKafkaSide makes the worker's group member (broker.Member), with the
// worker's own options: what it consumes, its fetch limits, its
// partitioner, and the transaction markers it keeps.
func newKafkaSide(w *Worker) (kafkaSide, error) {
	mc := w.cfg.member()
	mc.InstanceID, mc.Health, mc.Assigned, mc.Revoked = w.instanceID, w.health, w.assigned, w.revoked
	// Before the client: the group callbacks read it from their first
	// call on.
	mc.Assignment = &broker.Assignment{}
	w.synced.Store(mc.Assignment)
	mc.Opts = []kgo.Opt{
		kgo.AutoCommitMarks(),
		// Transaction markers tell how far the worker has read, so that a
		// partition ending in one can go quiet (quiet.go); dispatch drops
		// them.
		kgo.KeepControlRecords(),
		kgo.RecordPartitioner(outPartitioner{broker.KeyPartitioner()}),
		kgo.ProducerBatchMaxBytes(int32(min(w.cfg.maxMessageBytes, 1<<20))),
		// Fetch sizes count compressed bytes, and tasks compress well: at
		// the client's defaults (50 MiB, 1 MiB a partition) one fetch of a
		// backlog decodes to hundreds of thousands of records, far past
		// MaxBufferedRecords. These keep a fetch near a few thousand.
		kgo.FetchMaxBytes(fetchMaxBytes),
		kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes),
		// A client has one fetch at a time per broker. At the default 5 s,
		// a fetch for partitions with nothing new (the others' records
		// still buffered, or re-sought by a commit) held every partition
		// of that broker for 5 s.
		kgo.FetchMaxWait(fetchMaxWait),
	}
	if topics, regex := w.queues.subscription(); regex {
		// New queues that match are found by the client's metadata
		// refreshes (every 10 s, or at once when a wake-up names one:
		// quiet.go); onceq's own topics never match.
		mc.Opts = append(mc.Opts, kgo.ConsumeRegex(), kgo.ConsumeTopics(topics...),
			kgo.ConsumeExcludeTopics(`^onceq-.*`, `^__.*`), kgo.MetadataMaxAge(patternRefresh))
	} else {
		mc.Opts = append(mc.Opts, kgo.ConsumeTopics(topics...))
	}
	if mc.AtLeastOnce {
		// The worker commits its marks every commit interval itself; the
		// client's own autocommit (100ms at least) is a backstop.
		mc.Opts = append(mc.Opts, kgo.AutoCommitInterval(max(w.cfg.commitInterval, 100*time.Millisecond)))
	}
	m, err := broker.NewMember(mc)
	if err != nil {
		return nil, err
	}
	if mc.AtLeastOnce {
		return &plainSide{baseSide{m: m, w: w}}, nil
	}
	return &txnSide{baseSide{m: m, w: w}}, nil
}

type baseSide struct {
	m *broker.Member
	w *Worker
}

func (b *baseSide) poll(ctx context.Context, max int) kgo.Fetches { return b.m.Poll(ctx, max) }
func (b *baseSide) pause(parts map[string][]int32)                { b.m.Client().PauseFetchPartitions(parts) }
func (b *baseSide) resume(parts map[string][]int32)               { b.m.Client().ResumeFetchPartitions(parts) }
func (b *baseSide) refreshMetadata()                              { b.m.Client().ForceMetadataRefresh() }
func (b *baseSide) rejoin()                                       { b.m.Client().ForceRebalance() }
func (b *baseSide) holds() func(string, int32) bool               { return b.m.Holds() }
func (b *baseSide) leave(ctx context.Context)                     { b.m.Leave(ctx, "onceq worker shutdown") }
func (b *baseSide) close()                                        { b.m.Close() }

func (b *baseSide) pauseQueue(queue string, paused bool) {
	if paused {
		b.m.Client().PauseFetchTopics(queue)
	} else {
		b.m.Client().ResumeFetchTopics(queue)
	}
}

// txnSide is the exactly-once side: a transaction commits the outputs and
// the offsets together (broker.Member.Commit).
type txnSide struct{ baseSide }

func (s *txnSide) commit(ctx context.Context, recs []*kgo.Record, offsets map[string]map[int32]kgo.EpochOffset, sources []*partState) (bool, []refusal, error) {
	// The session would commit the position of everything polled. The
	// worker commits, per partition, the offset of its first unfinished
	// record instead, for the partitions of sources that the group still
	// assigns it (Member.Commit says why).
	var txnOffsets []broker.TxnOffset
	for topic, ps := range offsets {
		for p, at := range ps {
			txnOffsets = append(txnOffsets, broker.TxnOffset{Topic: topic, Partition: p, At: at})
		}
	}
	also := map[string][]int32{}
	for _, ps := range sources {
		also[ps.tp.Topic] = append(also[ps.tp.Topic], ps.tp.Partition)
	}
	t, err := s.m.Commit(ctx, recs, txnOffsets, also, func(first error) {
		s.w.cfg.log.Warn("aborting commit: writing a record failed", "err", first)
	})
	if gone, ok := errors.AsType[*broker.NotAssignedError](err); ok {
		s.w.cfg.log.Info("commit aborted: a partition of it was assigned elsewhere", "err", err)
		s.w.lost(gone.Partitions, sources)
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	var refused []refusal
	for _, f := range t.Failed {
		if tooLarge(f.Err) {
			refused = append(refused, refusal{f.Rec, f.Err})
		}
	}
	return t.Committed, refused, nil
}

// refusal is a record the brokers refused as too large.
type refusal struct {
	rec *kgo.Record
	err error
}

// tooLarge reports a produce error that writing the record again cannot
// fix.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// plainSide is the at-least-once side: outputs are flushed, then offsets
// committed; a crash in between writes the outputs again.
type plainSide struct{ baseSide }

func (s *plainSide) commit(ctx context.Context, recs []*kgo.Record, offsets map[string]map[int32]kgo.EpochOffset, _ []*partState) (bool, []refusal, error) {
	var refused []refusal
	cl := s.m.Client()
	for _, pr := range cl.ProduceSync(ctx, recs...) {
		switch {
		case pr.Err == nil:
		case tooLarge(pr.Err):
			refused = append(refused, refusal{pr.Record, pr.Err})
		default:
			return false, nil, pr.Err
		}
	}
	if len(refused) > 0 {
		return false, refused, nil
	}
	cl.MarkCommitOffsets(offsets)
	return true, nil, cl.CommitMarkedOffsets(ctx)
}

// outPartitioner places changelog records on the partition they name (the
// source partition's number) and everything else as Kafka's default
// partitioner does (murmur2 of the key), so that an emitted task lands
// where any other client would put it.
type outPartitioner struct{ keyed kgo.Partitioner }

func (p outPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if strings.HasPrefix(topic, broker.ChangelogPrefix) {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return p.keyed.ForTopic(topic)
}
