package inspect

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// view returns the loaded view of queue, loading it first: its records
// topic is read from where the view stopped (the start, for a new view) to
// its last stable offsets as they are now, and followed from there on.
func (in *Inspector) view(ctx context.Context, queue string) (*queueView, error) {
	qs, errs := in.views(ctx, []string{queue})
	return qs[0], errs[0]
}

// views is view for many queues at once, each with its own error: the
// queues not loaded yet are loaded together, with one metadata and one
// ListOffsets request for all of them, whatever their number.
func (in *Inspector) views(ctx context.Context, queues []string) ([]*queueView, []error) {
	out, errs := make([]*queueView, len(queues)), make([]error, len(queues))
	var load []*queueView
	in.mu.Lock()
	for i, queue := range queues {
		if errs[i] = onceq.ValidateTaskQueue(queue); errs[i] != nil {
			continue
		}
		if in.closed {
			errs[i] = ErrClosed
			continue
		}
		q, ok := in.queues[queue]
		if !ok {
			q = &queueView{queue: queue, topic: broker.RecordsTopic(queue), ready: make(chan struct{}), seen: map[uint64]struct{}{}}
			in.queues[queue] = q
			load = append(load, q)
		}
		out[i] = q
	}
	if len(load) > 0 {
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			in.load(load)
		}()
	}
	in.mu.Unlock()
	for i, q := range out {
		if q == nil {
			continue
		}
		select {
		case <-q.ready:
		case <-ctx.Done():
			out[i], errs[i] = nil, fmt.Errorf("inspect: loading the task records of %s: %w", q.queue, ctx.Err())
			continue
		}
		if q.err != nil {
			out[i], errs[i] = nil, q.err
		}
	}
	return out, errs
}

// load finds where to read the queues' records topics from and to, starts
// following them and, for each queue with anything to read, lets the
// follower close its ready once it has read that far. A failure is kept
// in the queue's err and the queue is forgotten, so that the next query
// tries again.
func (in *Inspector) load(qs []*queueView) {
	fail := func(q *queueView, err error) {
		in.mu.Lock()
		delete(in.queues, q.queue)
		in.mu.Unlock()
		q.err = err
		close(q.ready)
	}
	failAll := func(err error) {
		for _, q := range qs {
			fail(q, err)
		}
	}
	ctx, cancel := context.WithTimeout(in.ctx, in.cfg.loadTimeout)
	defer cancel()
	topics := make([]string, len(qs))
	for i, q := range qs {
		topics[i] = q.topic
	}
	counts, err := in.adm.PartitionCounts(ctx, topics...)
	if err != nil {
		failAll(fmt.Errorf("inspect: %w", err))
		return
	}
	parts := map[string][]int32{}
	found := qs[:0:0]
	for _, q := range qs {
		n := counts[q.topic]
		if n == 0 {
			// The next query asks the brokers again: a worker or a
			// producer may create the topic any moment.
			in.adm.Forget(q.topic)
			fail(q, fmt.Errorf("inspect: queue %s: %w", q.queue, ErrNoQueue))
			continue
		}
		for p := range n {
			parts[q.topic] = append(parts[q.topic], p)
		}
		found = append(found, q)
	}
	if len(found) == 0 {
		return
	}
	ends, err := in.adm.StableOffsets(ctx, parts)
	if err != nil {
		for _, q := range found {
			fail(q, fmt.Errorf("inspect: end offsets of %s: %w", q.topic, in.cfg.conn.Explain(err)))
		}
		return
	}
	from := map[string]map[int32]kgo.Offset{}
	var started []*queueView
	for _, q := range found {
		if len(ends[q.topic]) != len(parts[q.topic]) {
			fail(q, fmt.Errorf("inspect: end offsets of %s: the brokers did not answer for every partition: try again", q.topic))
			continue
		}
		o, err := in.start(q, ends[q.topic])
		if err != nil {
			fail(q, err)
			continue
		}
		from[q.topic] = o
		started = append(started, q)
	}
	if len(started) == 0 {
		return
	}
	if err := in.follow(from); err != nil {
		for _, q := range started {
			fail(q, err)
		}
		return
	}
	in.mu.Lock()
	for _, q := range started {
		in.checkLoaded(q)
	}
	in.mu.Unlock()
}

// start sets a queue's target (its records topic's end offsets) and its
// positions from the store, counts what the store holds of it (or drops
// it, if the topic is behind the view), and returns where to follow each
// partition from.
func (in *Inspector) start(q *queueView, ends map[int32]int64) (map[int32]kgo.Offset, error) {
	q.target, q.pos = map[int32]int64{}, map[int32]int64{}
	rebuild := false
	for p, end := range ends {
		q.target[p] = end
		next, err := in.storedOffset(q.topic, p)
		if err != nil {
			return nil, err
		}
		if next > end {
			rebuild = true // the topic is not the one the view read
		}
		q.pos[p] = next
	}
	if rebuild {
		in.cfg.log.Warn("task records topic is behind the view (recreated?): rebuilding the view of the queue", "queue", q.queue)
		if err := in.dropQueue(q); err != nil {
			return nil, err
		}
	} else if err := in.countQueue(q); err != nil {
		return nil, err
	}
	from := make(map[int32]kgo.Offset, len(q.pos))
	for p, next := range q.pos {
		from[p] = kgo.NewOffset().At(next)
	}
	return from, nil
}

// checkLoaded closes q.ready once every partition is read to its target.
// in.mu is held.
func (in *Inspector) checkLoaded(q *queueView) {
	if q.target == nil {
		return
	}
	for p, t := range q.target {
		if q.pos[p] < t {
			return
		}
	}
	q.target = nil
	close(q.ready)
}

// storedOffset is where the view stopped reading a partition: 0 if it
// never read it.
func (in *Inspector) storedOffset(topic string, p int32) (int64, error) {
	v, closer, err := in.db.Get(offsetKey(topic, p))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, in.dbErr(err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, errors.New("inspect: corrupt view offset: rebuild the view (remove its directory)")
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// follow adds topics' partitions to the follower, which it starts with
// the first ones.
func (in *Inspector) follow(from map[string]map[int32]kgo.Offset) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return ErrClosed
	}
	if in.cl != nil {
		in.cl.AddConsumePartitions(from)
		return nil
	}
	cl, err := in.cfg.conn.NewClient(
		kgo.ConsumePartitions(from),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers take offsets: seeing them is how the view
		// knows it read a partition to its last stable offset.
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A broker answers a waiting fetch as soon as a transaction
		// commits to the partition; this bounds how late the view is when
		// one does not (the embedded broker, at times, for the first
		// fetch of a partition).
		kgo.FetchMaxWait(followMaxWait),
		kgo.WithLogger(broker.KgoLogger(in.cfg.log)),
	)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	in.cl = cl
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		in.followLoop(cl)
	}()
	return nil
}

// followMaxWait is the follower's fetch wait. Every fetch names every
// records partition the view follows, so a server that loaded the views
// of hundreds of queues would spend a tenth of a core on idle fetches with
// a short one (50 ms: 7% of a core at 500 queues, 2% at 500 ms).
const followMaxWait = 500 * time.Millisecond

// followLoop applies what the follower fetches until Close.
func (in *Inspector) followLoop(cl *kgo.Client) {
	for {
		fs := cl.PollFetches(in.ctx)
		if in.ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			in.cfg.log.Warn("reading task records", "topic", topic, "partition", p, "err", err)
		})
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			for recs := fp.Records; len(recs) > 0; {
				n, size := 0, 0
				for n < len(recs) && (n == 0 || size < applyBatchBytes) {
					size += len(recs[n].Value)
					n++
				}
				if err := in.apply(fp.Topic, fp.Partition, recs[:n], size); err != nil {
					if in.ctx.Err() == nil {
						in.cfg.log.Error("applying task records: the view stops following them", "topic", fp.Topic, "err", err)
					}
					return
				}
				recs = recs[n:]
			}
		})
	}
}

// applyBatchBytes bounds the records that one view batch applies: a
// Pebble batch past half a memtable is flushed on its own, and a large
// one is copied each time it grows.
const applyBatchBytes = 4 << 20

// apply writes records of a partition, size bytes of values, into the
// view in one batch, with the partition's next offset, then counts them
// and wakes waiters.
func (in *Inspector) apply(topic string, partition int32, recs []*kgo.Record, size int) error {
	queue, ok := broker.QueueOfRecords(topic)
	if !ok {
		return nil
	}
	in.writeMu.Lock()
	defer in.writeMu.Unlock()
	in.mu.Lock()
	q := in.queues[queue]
	in.mu.Unlock()
	if q == nil {
		return nil // a load that failed: the next one reads again
	}
	// Each line's value is the line and its meta; its keys and index entry
	// are under 80 bytes more for IDs of UUID length.
	b := in.db.NewBatchWithSize(size + size/2)
	defer b.Close()
	touched := map[string]meta{} // this batch's records, newer than the store
	var counts [8]int64
	var finals [][]byte
	next := recs[len(recs)-1].Offset + 1
	for _, r := range recs {
		if r.Attrs.IsControl() || len(r.Value) == 0 {
			continue
		}
		for value, n := r.Value, 1; len(value) > 0; n++ {
			line := value
			if i := bytes.IndexByte(value, '\n'); i >= 0 {
				line, value = value[:i], value[i+1:]
			} else {
				value = nil
			}
			if len(line) == 0 {
				continue
			}
			rec, err := onceq.DecodeTaskRecord(line)
			if err != nil {
				in.cfg.log.Warn("malformed task record skipped", "topic", topic, "partition", partition, "offset", r.Offset, "line", n, "err", err)
				continue
			}
			tr := &rec
			if tr.Queue != queue {
				continue
			}
			key := recordKey(queue, tr.ID)
			m := meta{state: stateIndex(tr.State), last: lastTime(tr, r.Timestamp), worker: tr.Worker != "", due: dueOf(tr)}
			old, had, err := in.stored(q, key, touched)
			if err != nil {
				return err
			}
			if had && old.worker && !m.worker {
				continue // a producer's pending record never hides a worker's
			}
			if had {
				counts[old.state]--
				if err := b.Delete(indexKey(queue, old, tr.ID), nil); err != nil {
					return err
				}
				if old.due != 0 {
					if err := b.Delete(dueKey(queue, old.due, tr.ID), nil); err != nil {
						return err
					}
				}
			}
			counts[m.state]++
			touched[string(key)] = m
			q.seen[xxhash.Sum64(key)] = struct{}{}
			// The line as it came: its meta, then its JSON.
			op := b.SetDeferred(len(key), metaLen+len(line))
			copy(op.Key, key)
			m.put(op.Value[:metaLen])
			copy(op.Value[metaLen:], line)
			if err := op.Finish(); err != nil {
				return err
			}
			if err := b.Set(indexKey(queue, m, tr.ID), nil, nil); err != nil {
				return err
			}
			if m.due != 0 {
				if err := b.Set(dueKey(queue, m.due, tr.ID), nil, nil); err != nil {
					return err
				}
			}
			if tr.State.Final() {
				finals = append(finals, key)
			}
		}
	}
	if err := b.Set(offsetKey(topic, partition), binary.BigEndian.AppendUint64(nil, uint64(next)), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, n := range counts {
		q.counts[i] += n
	}
	q.pos[partition] = next
	in.checkLoaded(q)
	if len(in.recent) > 0 {
		for k := range touched {
			delete(in.recent, k)
		}
	}
	for _, k := range finals {
		in.wake(k)
	}
	return nil
}

// stored returns the meta of a task's record as the batch being built
// leaves it: touched, else the store, which is asked only when the
// queue's seen set has the key's hash: a new task's record, the usual
// case, costs no lookup.
func (in *Inspector) stored(q *queueView, key []byte, touched map[string]meta) (meta, bool, error) {
	if m, ok := touched[string(key)]; ok {
		return m, true, nil
	}
	if _, ok := q.seen[xxhash.Sum64(key)]; !ok {
		return meta{}, false, nil
	}
	v, closer, err := in.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return meta{}, false, nil
	}
	if err != nil {
		return meta{}, false, err
	}
	defer closer.Close()
	m, _, err := decodeMeta(v)
	return m, err == nil, err
}

// countQueue counts a stored queue's tasks per state, from its index,
// and fills its seen set from its records' keys.
func (in *Inspector) countQueue(q *queueView) error {
	prefix := queuePrefix(prefixRecord, q.queue)
	it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return in.dbErr(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		q.seen[xxhash.Sum64(it.Key())] = struct{}{}
	}
	if err := it.Close(); err != nil {
		return in.dbErr(err)
	}
	for i := range onceq.TaskStates {
		prefix := indexPrefix(q.queue, byte(i))
		it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return in.dbErr(err)
		}
		var n int64
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			return in.dbErr(err)
		}
		q.counts[i] = n
	}
	return nil
}

// dropQueue forgets everything of a queue, to read it again from the
// start.
func (in *Inspector) dropQueue(q *queueView) error {
	for _, p := range []byte{prefixRecord, prefixIndex, prefixDue, prefixOffset} {
		name := q.queue
		if p == prefixOffset {
			name = q.topic
		}
		prefix := queuePrefix(p, name)
		if err := in.db.DeleteRange(prefix, prefixEnd(prefix), pebble.Sync); err != nil {
			return in.dbErr(err)
		}
	}
	for p := range q.pos {
		q.pos[p] = 0
	}
	q.counts = [8]int64{}
	clear(q.seen)
	return nil
}

// sweepInterval is how often tasks past the retention are deleted.
const sweepInterval = time.Minute

// sweepLoop deletes the tasks past the retention from the view, every
// sweepInterval: queries hide them from the moment they pass it.
func (in *Inspector) sweepLoop() {
	defer in.wg.Done()
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-in.ctx.Done():
			return
		case <-t.C:
		}
		in.mu.Lock()
		var qs []*queueView
		for _, q := range in.queues {
			qs = append(qs, q)
		}
		now := in.cfg.now()
		for k, rs := range in.recent {
			if now.Sub(rs.at) >= recentTTL {
				delete(in.recent, k)
			}
		}
		in.mu.Unlock()
		for _, q := range qs {
			if err := in.sweep(q); err != nil && in.ctx.Err() == nil {
				in.cfg.log.Warn("forgetting tasks past the retention", "queue", q.queue, "err", err)
			}
		}
	}
}

// sweep deletes a queue's tasks whose last transition is past the
// retention.
func (in *Inspector) sweep(q *queueView) error {
	in.writeMu.Lock()
	defer in.writeMu.Unlock()
	cutoff := in.cutoff()
	b := in.db.NewBatch()
	defer b.Close()
	var counts [8]int64
	for i := range onceq.TaskStates {
		prefix := indexPrefix(q.queue, byte(i))
		upper := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), uint64(max(cutoff, 0)))
		it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			_, id := indexID(it.Key(), len(prefix))
			if err := b.Delete(append([]byte(nil), it.Key()...), nil); err != nil {
				it.Close()
				return err
			}
			key := recordKey(q.queue, id)
			if err := in.deleteDue(b, q.queue, key, id, onceq.TaskStates[i]); err != nil {
				it.Close()
				return err
			}
			if err := b.Delete(key, nil); err != nil {
				it.Close()
				return err
			}
			// Another ID of the same hash (one chance in 2^64 per pair)
			// would be looked up no more: its next record would leave
			// its old index entry behind, one task counted twice.
			delete(q.seen, xxhash.Sum64(key))
			counts[i]--
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	if b.Empty() {
		return nil
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	in.mu.Lock()
	for i, n := range counts {
		q.counts[i] += n
	}
	in.mu.Unlock()
	return nil
}

// deleteDue deletes the due index entry of a task in state st, if it
// has one, whose record the batch is deleting.
func (in *Inspector) deleteDue(b *pebble.Batch, queue string, key []byte, id string, st onceq.TaskState) error {
	if st != onceq.StateScheduled && st != onceq.StateRetrying {
		return nil
	}
	v, closer, err := in.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	m, _, err := decodeMeta(v)
	closer.Close()
	if err != nil || m.due == 0 {
		return err
	}
	return b.Delete(dueKey(queue, m.due, id), nil)
}
