package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/delay"
)

// The backlog of a queue: its tasks published and not yet taken by an
// HTTP consumer, lmstfy's ready queue. They are the records past the pull
// group's committed offsets (all the retained records of a queue never
// consumed), but for the tasks handed out and the records whose run
// ended (stateOf): a record stays past the committed offset until every
// earlier one of its partition is done, a task acknowledged, or one that
// went back to its queue or was retried, whose copy waits later on in
// the partition. A lane queue's size counts from what the server keeps
// of its lane's backlog (lanesize.go). Delayed tasks wait
// in the delay topics and are not in it until they are due: the peek of
// one job finds it there (delayedTask).

// maxBacklogScan bounds the records a size of a queue of its own reads to
// count its backlog exactly; past it, the size is the records past the
// committed offsets, an upper bound (transaction markers count).
const maxBacklogScan = 10_000

// backlogRange is where a partition's backlog starts and ends.
type backlogRange struct{ from, end int64 }

// backlogRanges returns the backlog's offsets of each partition of queue's
// topic (its lane, for a lane queue) that has any. A queue that does not
// exist has none.
func (s *Server) backlogRanges(ctx context.Context, queue string) (map[int32]backlogRange, int32, error) {
	topic := onceq.QueueTopic(queue)
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return nil, 0, err
	}
	defer adm.Close()
	info, err := adm.DescribeTopic(ctx, topic)
	if errors.Is(err, broker.ErrTopicNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	committed, err := adm.Kadm().FetchOffsetsForTopics(ctx, s.cfg.pullGroup, topic)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // nothing consumed yet
	}
	if err != nil {
		return nil, 0, fmt.Errorf("the offsets of group %s: %w", s.cfg.pullGroup, err)
	}
	out := map[int32]backlogRange{}
	for _, p := range info.Partitions {
		from := p.Start
		if o, ok := committed.Lookup(topic, p.Partition); ok && o.Err == nil && o.At > from {
			from = o.At
		}
		if p.Stable > from {
			out[p.Partition] = backlogRange{from, p.Stable}
		}
	}
	return out, int32(len(info.Partitions)), nil
}

// readRange calls fn with the records of topic in ranges, transaction
// markers too, in offset order within a partition (partitions
// interleave), until fn says a partition is done or its range ends.
func (s *Server) readRange(ctx context.Context, topic string, ranges map[int32]backlogRange, fn func(rec *kgo.Record) (done bool, err error)) error {
	from := make(map[int32]int64, len(ranges))
	for p, r := range ranges {
		from[p] = r.from
	}
	return broker.ReadPartitions(ctx, s.cfg.conn, topic, from, func(rec *kgo.Record) (bool, error) {
		end := ranges[rec.Partition].end
		if rec.Offset >= end {
			return true, nil
		}
		done, err := fn(rec)
		return done || rec.Offset >= end-1, err
	}, kgo.KeepControlRecords())
}

// readBacklog calls fn with the tasks of queue in the backlog of its topic
// that wait (stateOf) in the partitions ranges names, in offset order
// within a partition (partitions interleave), until fn says a partition
// is done. The tasks of a lane's other queues are passed over.
func (s *Server) readBacklog(ctx context.Context, queue string, ranges map[int32]backlogRange, fn func(t onceq.Task, rec *kgo.Record) (done bool)) error {
	return s.readRange(ctx, onceq.QueueTopic(queue), ranges, func(rec *kgo.Record) (bool, error) {
		if rec.Attrs.IsControl() {
			return false, nil
		}
		t, err := onceq.FromRecord(rec)
		if err != nil || t.Queue != queue || s.stateOf(ctx, queue, t.ID, rec.Partition, rec.Offset) != waiting {
			return false, nil // a malformed record is the workers' to dead-letter
		}
		return fn(t, rec), nil
	})
}

// backlogState is where a task's record in the backlog's range stands.
type backlogState int

const (
	// waiting for a consumer.
	waiting backlogState = iota
	// out: handed out or acknowledged (by this server's ledger, which
	// follows the group's lease topic), or, of a lane queue (whose
	// destroy cancels its tasks), canceled: not waiting now.
	out
	// ended: its run is over (a worker's record names it, or a later run
	// in its partition; or a final record does), and it never waits
	// again, though it stays past the group's committed offset while an
	// earlier record of its partition is unfinished. A task that went
	// back to its queue, or failed and was retried, left such a record
	// behind: its copy, later in the partition, is the one that waits.
	ended
)

// stateOf says where the record of task id of queue at partition and
// offset stands.
func (s *Server) stateOf(ctx context.Context, queue, id string, partition int32, offset int64) backlogState {
	if st, ok := s.pull.LeaseOf(queue, id); ok && (st.Taken || st.Acked) {
		return out
	}
	if onceq.IsLaneQueue(queue) {
		if c, err := s.in.CancelRequested(ctx, queue, id); err == nil && c {
			return out
		}
	}
	r, err := s.in.Get(ctx, queue, id)
	if err == nil && (r.Worker != "" || r.State.Final()) && r.Partition == partition && r.Offset >= offset {
		return ended
	}
	return waiting
}

// backlogSize counts the backlog of topic: exactly for a lane queue
// (laneSize), and for a queue of its own up to maxBacklogScan records,
// past which it is their number, an upper bound.
func (s *Server) backlogSize(ctx context.Context, topic string) (int64, error) {
	if onceq.IsLaneQueue(topic) {
		return s.laneSize(ctx, topic)
	}
	ranges, _, err := s.backlogRanges(ctx, topic)
	if err != nil {
		return 0, err
	}
	var span int64
	for _, r := range ranges {
		span += r.end - r.from
	}
	if span > maxBacklogScan {
		return span, nil
	}
	var n int64
	err = s.readBacklog(ctx, topic, ranges, func(onceq.Task, *kgo.Record) bool { n++; return false })
	return n, err
}

// backlogHead returns the task of the backlog of topic that waits the
// longest (the earliest enqueued of each partition's first, and of those
// enqueued in one millisecond the first submitted, where their IDs tell:
// onceq.CompareSubmissions), ok false if there is none.
func (s *Server) backlogHead(ctx context.Context, topic string) (t onceq.Task, ok bool, err error) {
	ranges, _, err := s.backlogRanges(ctx, topic)
	if err != nil {
		return t, false, err
	}
	err = s.readBacklog(ctx, topic, ranges, func(c onceq.Task, _ *kgo.Record) bool {
		if !ok || c.Enqueued.Before(t.Enqueued) || c.Enqueued.Equal(t.Enqueued) && onceq.CompareSubmissions(&c, &t) < 0 {
			t, ok = c, true
		}
		return true
	})
	return t, ok, err
}

// keyPartition is the partition of a topic of n partitions that the task
// id of queue is written to: its key's (the key of a task published over
// HTTP), as every onceq client places it (broker.KeyPartitioner).
func keyPartition(queue, id string, n int) int32 {
	return broker.KeyPartition((&onceq.Task{Queue: queue, ID: id}).PartitionKey(), n)
}

// findTask finds the task id of queue, whose record is rec (nil: none):
// handed out, where its lease says (spent: the take spent a try); run
// by a worker, where its record says; else waiting or delayed
// (waitingTask). A run's queue record that cannot be read (gone past the
// queue's retention, say) is not found; err is the error of a read of
// the queue's backlog.
func (s *Server) findTask(ctx context.Context, queue, id string, rec *onceq.TaskRecord) (t onceq.Task, found, spent bool, err error) {
	switch st, leased := s.pull.LeaseOf(queue, id); {
	case leased && st.Taken:
		t, err = s.taskAt(ctx, queue, st.Partition, st.Offset)
		return t, err == nil, !st.Freeze, nil
	case rec != nil && (rec.Worker != "" || rec.State.Final()):
		t, err = s.taskAt(ctx, queue, rec.Partition, rec.Offset)
		return t, err == nil, false, nil
	}
	// With a producer's record (its submission) or none.
	var since time.Time
	if rec != nil {
		since = rec.Enqueued
	}
	t, found, err = s.waitingTask(ctx, queue, id, since)
	return t, found, false, err
}

// waitingTask finds the task id of queue that waits to run: in the
// queue's backlog or, delayed, in the delay buckets (delayedTask); since,
// when not zero, is its submission time.
func (s *Server) waitingTask(ctx context.Context, queue, id string, since time.Time) (t onceq.Task, ok bool, err error) {
	if t, ok, err = s.backlogTask(ctx, queue, id); err != nil || ok {
		return t, ok, err
	}
	return s.delayedTask(ctx, queue, id, since)
}

// backlogTask finds the task id in the backlog of topic, in the
// partition its key (a task published over HTTP has none of its own:
// onceq.Task.PartitionKey) maps to; for a lane queue, also in the one its
// bare ID maps to, where a record keyed by it is.
func (s *Server) backlogTask(ctx context.Context, topic, id string) (t onceq.Task, ok bool, err error) {
	ranges, n, err := s.backlogRanges(ctx, topic)
	if err != nil || n == 0 {
		return t, false, err
	}
	read := map[int32]backlogRange{}
	for _, key := range [][]byte{(&onceq.Task{Queue: topic, ID: id}).PartitionKey(), []byte(id)} {
		p := broker.KeyPartition(key, int(n))
		if r, found := ranges[p]; found {
			read[p] = r
		}
	}
	if len(read) == 0 {
		return t, false, nil
	}
	err = s.readBacklog(ctx, topic, read, func(c onceq.Task, _ *kgo.Record) bool {
		if c.ID == id {
			t, ok = c, true
		}
		return ok
	})
	return t, ok, err
}

// clockSkew bounds how far the server's clock, which stamps a task's
// submission, may be ahead of the brokers', which stamp the delay
// buckets' records (LogAppendTime).
const clockSkew = 15 * time.Minute

// delayedTask finds the task id of queue in the delay buckets, where a
// task published with a delay waits until it is due: in the partition of
// each bucket topic that its key maps to, among the records the delay
// service has not moved on (past its group's committed offset) and, when
// since (its submission) is known, appended since then.
func (s *Server) delayedTask(ctx context.Context, queue, id string, since time.Time) (t onceq.Task, ok bool, err error) {
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return t, false, err
	}
	defer adm.Close()
	buckets, err := delay.BucketTopics(ctx, adm)
	if err != nil || len(buckets) == 0 {
		return t, false, err
	}
	topics := slices.Collect(maps.Keys(buckets))
	kad := adm.Kadm()
	starts, err := kad.ListStartOffsets(ctx, topics...)
	if err != nil {
		return t, false, fmt.Errorf("the start offsets of the delay buckets: %w", err)
	}
	ends, err := kad.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return t, false, fmt.Errorf("the stable offsets of the delay buckets: %w", err)
	}
	moved, err := kad.FetchOffsetsForTopics(ctx, delay.DefaultGroup, topics...)
	if errors.Is(err, kerr.GroupIDNotFound) {
		moved, err = nil, nil // nothing moved yet
	}
	if err != nil {
		return t, false, fmt.Errorf("the offsets of group %s: %w", delay.DefaultGroup, err)
	}
	var after kadm.ListedOffsets
	if !since.IsZero() {
		if after, err = kad.ListOffsetsAfterMilli(ctx, since.Add(-clockSkew).UnixMilli(), topics...); err != nil {
			return t, false, fmt.Errorf("the offsets of the delay buckets at %v: %w", since, err)
		}
	}
	from, end := map[string]map[int32]int64{}, map[string]int64{}
	for topic, parts := range ends {
		p := keyPartition(queue, id, len(parts))
		e, okEnd := ends.Lookup(topic, p)
		if !okEnd || e.Err != nil {
			continue
		}
		at := int64(0)
		if o, found := starts.Lookup(topic, p); found && o.Err == nil {
			at = o.Offset
		}
		if o, found := moved.Lookup(topic, p); found && o.Err == nil {
			at = max(at, o.At)
		}
		if o, found := after.Lookup(topic, p); found && o.Err == nil {
			at = max(at, o.Offset)
		}
		if at < e.Offset {
			from[topic], end[topic] = map[int32]int64{p: at}, e.Offset
		}
	}
	err = broker.ReadTopics(ctx, s.cfg.conn, from, func(rec *kgo.Record) (bool, error) {
		if rec.Offset >= end[rec.Topic] {
			return true, nil
		}
		last := rec.Offset >= end[rec.Topic]-1
		if rec.Attrs.IsControl() || ok {
			return last || ok, nil
		}
		if c, err := onceq.FromRecord(rec); err == nil && c.ID == id && c.Queue == queue {
			t, ok = c, true
		}
		return last || ok, nil
	}, kgo.KeepControlRecords())
	return t, ok, err
}

// backlogWait bounds a read of a backlog.
const backlogWait = 10 * time.Second

// backlogError answers a failed read of a backlog.
func backlogError(err error) error {
	return &apiError{status: http.StatusServiceUnavailable, msg: fmt.Sprintf("reading the queue's records: %v: retry", err)}
}

// size: GET /api/{ns}/{queue}/size, lmstfy's: the queue's backlog, the
// tasks published and due that no consumer has taken (0 for a queue that
// does not exist).
func (s *Server) size(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), backlogWait)
	defer cancel()
	n, err := s.backlogSize(ctx, topic)
	if err != nil {
		writeError(w, backlogError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespace": r.PathValue("ns"), "queue": r.PathValue("queue"), "size": n})
}

// peekQueue: GET /api/{ns}/{queue}/peek, lmstfy's: the job of the backlog
// that waits the longest, as a consume would answer it but taking
// nothing; 404 when there is none.
func (s *Server) peekQueue(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), backlogWait)
	defer cancel()
	t, ok, err := s.backlogHead(ctx, topic)
	switch {
	case err != nil:
		writeError(w, backlogError(err))
	case !ok:
		writeError(w, &apiError{status: http.StatusNotFound, msg: "the queue is empty"})
	default:
		writeJSON(w, http.StatusOK, lmstfyJobOf(r.PathValue("ns"), &t, time.Now(), false))
	}
}

// destroyWait bounds a destroy: it reads the backlog and writes a record
// of each of its tasks.
const destroyWait = time.Minute

// destroy: DELETE /api/{ns}/{queue}, lmstfy's destroy: the tasks of the
// queue's backlog end canceled, with the reason destroyed, and are
// deleted (its records up to their ends, as Kafka's DeleteRecords does):
// 204. Tasks handed out, delayed or retrying are not in it and still run.
func (s *Server) destroy(w http.ResponseWriter, r *http.Request) {
	topic, err := s.pathQueue(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), destroyWait)
	defer cancel()
	ranges, n, err := s.backlogRanges(ctx, topic)
	if err != nil {
		writeError(w, backlogError(err))
		return
	}
	if onceq.IsLaneQueue(topic) {
		// The lane's records are its other queues' too: each task of the
		// backlog is canceled instead.
		var cerr error
		err = s.readBacklog(ctx, topic, ranges, func(t onceq.Task, _ *kgo.Record) bool {
			_, cerr = s.ctl.Cancel(ctx, topic, t.ID, control.CancelAhead(), control.CancelWait(0))
			return cerr != nil
		})
		if err = cmp.Or(cerr, err); err != nil {
			writeError(w, backlogError(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// Recorded first: a destroy that fails after leaves tasks recorded
	// canceled that a worker may still run, whose record then says so;
	// one that failed before would leave them pending forever.
	if err := s.recordDestroyed(ctx, topic, ranges, n); err != nil {
		writeError(w, backlogError(err))
		return
	}
	upTo := make(map[int32]int64, len(ranges))
	for p, rg := range ranges {
		upTo[p] = rg.end
	}
	if err := s.deleteRecords(ctx, topic, upTo); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ReasonDestroyed is the reason of a task canceled because its queue's
// backlog was destroyed (DELETE /api/{ns}/{queue}) before it ran.
const ReasonDestroyed = "destroyed"

// recordDestroyed records each task of the backlog of queue, of
// partitions partitions, in ranges canceled with ReasonDestroyed: their
// queue records are about to be deleted, so no worker ever ends them.
// Each record names the queue record it ends, and goes with the records
// the workers write of its partition (keyed <queue>/<partition>, as
// consumer/partition.go keys them), after them; it has no worker, so the
// view lets it replace a waiting task's record but not a worker's final
// one (a task a server held for its consumers may still run).
func (s *Server) recordDestroyed(ctx context.Context, queue string, ranges map[int32]backlogRange, partitions int32) error {
	if len(ranges) == 0 {
		return nil
	}
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return err
	}
	spec := broker.RecordsSpec(queue, partitions, 0)
	_, err = adm.EnsureTopics(ctx, []broker.TopicSpec{spec})
	adm.Close()
	if err != nil {
		return fmt.Errorf("the task records topic %s: %w", spec.Name, err)
	}
	cl, err := s.cfg.conn.NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	var mu sync.Mutex
	var failed error
	now := time.Now()
	err = s.readBacklog(ctx, queue, ranges, func(t onceq.Task, rec *kgo.Record) bool {
		tr := onceq.TaskRecord{ID: t.ID, Queue: queue, State: onceq.StateCanceled, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts,
			Priority: t.Priority, Enqueued: t.Enqueued, Finished: now, Reason: ReasonDestroyed, Error: "its queue's backlog was destroyed",
			Partition: rec.Partition, Offset: rec.Offset}
		key := []byte(queue + "/" + strconv.Itoa(int(rec.Partition)))
		cl.Produce(ctx, &kgo.Record{Topic: spec.Name, Key: key, Value: tr.AppendJSON(nil)}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = cmp.Or(failed, err)
				mu.Unlock()
			}
		})
		return false
	})
	if err == nil {
		err = cl.Flush(ctx)
	}
	mu.Lock()
	defer mu.Unlock()
	if err = cmp.Or(err, failed); err != nil {
		return fmt.Errorf("recording the destroyed tasks canceled: %w", err)
	}
	return nil
}

// deleteRecords deletes the records of topic below the offsets of upTo.
func (s *Server) deleteRecords(ctx context.Context, topic string, upTo map[int32]int64) error {
	if len(upTo) == 0 {
		return nil
	}
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	var offs kadm.Offsets
	for p, o := range upTo {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: o})
	}
	resps, err := adm.Kadm().DeleteRecords(ctx, offs)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("deleting the records of %s: %w", topic, err)
	}
	return nil
}

// errTaskGone says that a task's queue record was deleted.
var errTaskGone = errors.New("the task's record is gone from the queue (past its retention, or its backlog destroyed)")

// taskAt reads the task at a queue's partition and offset: its payload and
// headers, which the task's record does not keep.
func (s *Server) taskAt(ctx context.Context, queue string, partition int32, offset int64) (onceq.Task, error) {
	topic := onceq.QueueTopic(queue)
	cl, err := s.cfg.conn.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return onceq.Task{}, err
	}
	defer cl.Close()
	// A record deleted (past the queue's retention, or its backlog
	// destroyed) is below the partition's start: a fetch would wait for
	// records that never come.
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err != nil {
		return onceq.Task{}, err
	}
	if o, ok := starts.Lookup(topic, partition); ok && o.Err == nil && o.Offset > offset {
		return onceq.Task{}, errTaskGone
	}
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		for _, rec := range fs.Records() {
			if rec.Offset == offset {
				return onceq.FromRecord(rec)
			}
			if rec.Offset > offset {
				return onceq.Task{}, errTaskGone
			}
		}
	}
	return onceq.Task{}, errors.New("the task's record could not be read in time")
}
