package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
)

// kafkaSide is how the worker consumes and commits: a transact session
// (exactly-once) or a plain group client (at-least-once).
type kafkaSide interface {
	poll(ctx context.Context, max int) kgo.Fetches
	// commit writes recs and commits offsets, atomically for the
	// transactional side, for the results of the partitions sources.
	// committed false with a nil error means the commit was aborted (a
	// rebalance, a refused write, a source no longer assigned); refused
	// holds the records the brokers refused as too large, which no retry
	// would take.
	commit(ctx context.Context, recs []*kgo.Record, offsets map[string]map[int32]kgo.EpochOffset, sources []checkpoint.TP) (committed bool, refused []refusal, err error)
	// pause and resume stop and resume fetching partitions.
	pause(parts map[string][]int32)
	resume(parts map[string][]int32)
	// pauseQueue stops or resumes fetching a queue (a pause from the
	// control topic), apart from the partitions pause stops.
	pauseQueue(queue string, paused bool)
	// refreshMetadata asks for the brokers' topics now: a new queue that
	// matches a pattern.
	refreshMetadata()
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

func newKafkaSide(w *Worker) (kafkaSide, error) {
	opts := []kgo.Opt{
		kgo.ConsumerGroup(w.cfg.group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(w.cfg.sessionTimeout),
		// franz-go's default heartbeat (3s) must fit well in the session.
		kgo.HeartbeatInterval(min(3*time.Second, w.cfg.sessionTimeout/3)),
		kgo.OnPartitionsAssigned(w.assigned),
		kgo.OnPartitionsRevoked(w.revoked),
		kgo.OnPartitionsLost(w.health.OnLost(w.revoked)),
		kgo.WithHooks(w.health),
		kgo.AutoCommitMarks(),
		// Transaction markers tell how far the worker has read, so that a
		// partition ending in one can go quiet (quiet.go); dispatch drops
		// them.
		kgo.KeepControlRecords(),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(outPartitioner{kgo.StickyKeyPartitioner(nil)}),
		kgo.ProducerBatchMaxBytes(int32(min(w.cfg.maxMessageBytes, 1<<20))),
		kgo.WithLogger(broker.KgoLogger(w.cfg.log)),
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
		opts = append(opts, kgo.ConsumeRegex(), kgo.ConsumeTopics(topics...),
			kgo.ConsumeExcludeTopics(`^onceq-.*`, `^__.*`), kgo.MetadataMaxAge(patternRefresh))
	} else {
		opts = append(opts, kgo.ConsumeTopics(topics...))
	}
	if w.cfg.groupProtocol == ConsumerGroup {
		// Dynamic membership: a static member leaving with KIP-848 keeps
		// its partitions until the session times out.
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
		w.synced.Store(nil)
	} else {
		balancer, synced := broker.TrackAssignment(kgo.CooperativeStickyBalancer())
		w.synced.Store(synced)
		opts = append(opts, kgo.InstanceID(w.instanceID), kgo.Balancers(balancer))
	}
	if w.cfg.guarantee == AtLeastOnce {
		// The worker commits its marks every commit interval itself; the
		// client's own autocommit (100ms at least) is a backstop.
		opts = append(opts, kgo.AutoCommitInterval(max(w.cfg.commitInterval, 100*time.Millisecond)))
		cl, err := w.cfg.conn.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		return &plainSide{baseSide{cl: cl, w: w}}, nil
	}
	base, err := w.cfg.conn.Opts()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.TransactionalID("onceq-"+w.cfg.group+"-"+w.instanceID),
		kgo.TransactionTimeout(w.cfg.txnTimeout),
	)
	sess, err := kgo.NewGroupTransactSession(append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	return &txnSide{baseSide{cl: sess.Client(), w: w}, sess}, nil
}

type baseSide struct {
	cl *kgo.Client
	w  *Worker
}

func (b *baseSide) pause(parts map[string][]int32)  { b.cl.PauseFetchPartitions(parts) }
func (b *baseSide) resume(parts map[string][]int32) { b.cl.ResumeFetchPartitions(parts) }
func (b *baseSide) refreshMetadata()                { b.cl.ForceMetadataRefresh() }

func (b *baseSide) pauseQueue(queue string, paused bool) {
	if paused {
		b.cl.PauseFetchTopics(queue)
	} else {
		b.cl.ResumeFetchTopics(queue)
	}
}

// leave leaves the group for good. A static member (instance ID) does not
// leave when its client closes, so that a restart takes its partitions
// back without a rebalance; a clean shutdown says goodbye explicitly so
// that the others take over at once.
func (b *baseSide) leave(ctx context.Context) {
	b.cl.Close()
	if b.w.cfg.groupProtocol == ConsumerGroup {
		return // a dynamic member left when its client closed
	}
	adm, err := broker.NewAdmin(b.w.cfg.conn)
	if err != nil {
		return
	}
	defer adm.Close()
	if _, err := adm.Kadm().LeaveGroup(ctx, kadm.LeaveGroup(b.w.cfg.group).InstanceIDs(b.w.instanceID).Reason("onceq worker shutdown")); err != nil {
		b.w.cfg.log.Warn("leaving the group", "err", err)
	}
}

type txnSide struct {
	baseSide
	sess *kgo.GroupTransactSession
}

func (s *txnSide) poll(ctx context.Context, max int) kgo.Fetches {
	return s.sess.PollRecords(ctx, max)
}

func (s *txnSide) commit(ctx context.Context, recs []*kgo.Record, offsets map[string]map[int32]kgo.EpochOffset, sources []checkpoint.TP) (bool, []refusal, error) {
	// The session would commit the position of everything polled. The
	// worker commits, per partition, the offset of its first unfinished
	// record instead: the session calls this hook with the request it
	// built, fenced by the group's generation and member (KIP-447), and
	// still aborts on a revocation, which is what keeps the guarantee
	// across rebalances.
	//
	// The fence is the generation, not the partitions: a revocation the
	// session did not pass on (broker.Assignment) would let the
	// transaction commit a partition another member restored meanwhile.
	// The hook runs after the records were written: a sync that took a
	// source from the worker before it aborts the transaction, and one
	// after it gives the partition to no one before this member rejoins,
	// whose new owner then reads this transaction's changelog records, or
	// waits for them.
	setOffsets := func(req *kmsg.TxnOffsetCommitRequest) error {
		synced := s.w.synced.Load()
		for _, tp := range sources {
			if !synced.Has(tp.Topic, tp.Partition) {
				return fmt.Errorf("%w: %s", errNotAssigned, tp)
			}
		}
		setTxnOffsets(req, offsets)
		return nil
	}
	t, err := broker.RunTxn(ctx, s.sess, recs, setOffsets, func(first error) {
		s.w.cfg.log.Warn("aborting commit: writing a record failed", "err", first)
	})
	if errors.Is(err, errNotAssigned) {
		s.w.cfg.log.Info("commit aborted: a partition of it was assigned elsewhere", "err", err)
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

// errNotAssigned aborts a commit with the results of a partition the
// group's last sync did not assign to the worker.
var errNotAssigned = errors.New("consumer: partition no longer assigned to this worker")

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

// setTxnOffsets makes req commit exactly offsets, keeping the topic IDs the
// client filled in.
func setTxnOffsets(req *kmsg.TxnOffsetCommitRequest, offsets map[string]map[int32]kgo.EpochOffset) {
	ids := map[string][16]byte{}
	for _, t := range req.Topics {
		ids[t.Topic] = t.TopicID
	}
	req.Topics = req.Topics[:0]
	for _, topic := range slices.Sorted(maps.Keys(offsets)) {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic, rt.TopicID = topic, ids[topic]
		for _, p := range slices.Sorted(maps.Keys(offsets[topic])) {
			eo := offsets[topic][p]
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, eo.Offset, eo.Epoch
			rp.Metadata = &req.MemberID
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
}

func (s *txnSide) close() { s.sess.Close() }

// plainSide is the at-least-once side: outputs are flushed, then offsets
// committed; a crash in between writes the outputs again.
type plainSide struct{ baseSide }

func (s *plainSide) poll(ctx context.Context, max int) kgo.Fetches { return s.cl.PollRecords(ctx, max) }

func (s *plainSide) commit(ctx context.Context, recs []*kgo.Record, offsets map[string]map[int32]kgo.EpochOffset, _ []checkpoint.TP) (bool, []refusal, error) {
	var refused []refusal
	for _, pr := range s.cl.ProduceSync(ctx, recs...) {
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
	s.cl.MarkCommitOffsets(offsets)
	return true, nil, s.cl.CommitMarkedOffsets(ctx)
}

func (s *plainSide) close() { s.cl.Close() }

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
