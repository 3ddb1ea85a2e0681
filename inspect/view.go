package inspect

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
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
// records topics not loaded yet are loaded together, with one metadata and
// one ListOffsets request for all of them, whatever their number. The lane
// queues of a lane share its records topic, which is loaded once.
func (in *Inspector) views(ctx context.Context, queues []string) ([]*queueView, []error) {
	out, errs := make([]*queueView, len(queues)), make([]error, len(queues))
	var load []*topicView
	in.mu.Lock()
	for i, queue := range queues {
		if errs[i] = onceq.ValidateTaskQueue(queue); errs[i] != nil {
			continue
		}
		if in.closed {
			errs[i] = ErrClosed
			continue
		}
		topic := broker.RecordsTopic(queue)
		t, ok := in.topics[topic]
		if !ok {
			owner, _ := broker.QueueOfRecords(topic)
			t = &topicView{topic: topic, owner: owner, ready: make(chan struct{}),
				queues: map[string]*queueView{}, seen: map[uint64]struct{}{}}
			in.topics[topic] = t
			load = append(load, t)
		}
		out[i] = t.queue(queue)
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
		case <-q.t.ready:
		case <-ctx.Done():
			out[i], errs[i] = nil, fmt.Errorf("inspect: loading the task records of %s: %w", q.queue, ctx.Err())
			continue
		}
		switch err := q.t.err; {
		case errors.Is(err, ErrNoQueue):
			out[i], errs[i] = nil, fmt.Errorf("inspect: queue %s: %w", q.queue, ErrNoQueue)
		case err != nil:
			out[i], errs[i] = nil, err
		}
	}
	return out, errs
}

// queue returns the view of one of t's queues, made empty if t holds no
// record of it yet. in.mu is held.
func (t *topicView) queue(name string) *queueView {
	q := t.queues[name]
	if q == nil {
		q = &queueView{queue: name, t: t}
		t.queues[name] = q
	}
	return q
}

// holds reports whether a record of queue belongs in t: the queue is t's
// own or one of its lane queues.
func (t *topicView) holds(queue string) bool {
	if queue == t.owner {
		return true
	}
	lane, _, ok := onceq.SplitLane(queue)
	return ok && lane == t.owner
}

// load finds where to read the records topics from and to, starts
// following them and, for each topic with anything to read, lets the
// follower close its ready once it has read that far. A failure is kept
// in the topic's err and the topic is forgotten, so that the next query
// tries again.
func (in *Inspector) load(ts []*topicView) {
	fail := func(t *topicView, err error) {
		in.mu.Lock()
		delete(in.topics, t.topic)
		in.mu.Unlock()
		t.err = err
		close(t.ready)
	}
	failAll := func(err error) {
		for _, t := range ts {
			fail(t, err)
		}
	}
	ctx, cancel := context.WithTimeout(in.ctx, in.cfg.loadTimeout)
	defer cancel()
	topics := make([]string, len(ts))
	for i, t := range ts {
		topics[i] = t.topic
	}
	counts, ids, err := in.adm.Topics(ctx, topics...)
	if err != nil {
		failAll(fmt.Errorf("inspect: %w", err))
		return
	}
	parts := map[string][]int32{}
	found := ts[:0:0]
	for _, t := range ts {
		n := counts[t.topic]
		if n == 0 {
			// The next query asks the brokers again: a worker or a
			// producer may create the topic any moment.
			in.adm.Forget(t.topic)
			fail(t, fmt.Errorf("inspect: queue %s: %w", t.owner, ErrNoQueue))
			continue
		}
		for p := range n {
			parts[t.topic] = append(parts[t.topic], p)
		}
		found = append(found, t)
	}
	if len(found) == 0 {
		return
	}
	ends, err := in.adm.StableOffsets(ctx, parts)
	if err != nil {
		for _, t := range found {
			fail(t, fmt.Errorf("inspect: end offsets of %s: %w", t.topic, in.cfg.conn.Explain(err)))
		}
		return
	}
	from := map[string]map[int32]kgo.Offset{}
	var started []*topicView
	for _, t := range found {
		if len(ends[t.topic]) != len(parts[t.topic]) {
			fail(t, fmt.Errorf("inspect: end offsets of %s: the brokers did not answer for every partition: try again", t.topic))
			continue
		}
		o, err := in.start(t, ends[t.topic], ids[t.topic])
		if err != nil {
			fail(t, err)
			continue
		}
		from[t.topic] = o
		started = append(started, t)
	}
	if len(started) == 0 {
		return
	}
	if err := in.follow(from); err != nil {
		for _, t := range started {
			fail(t, err)
		}
		return
	}
	in.mu.Lock()
	for _, t := range started {
		in.checkLoaded(t)
	}
	in.mu.Unlock()
}

// start sets a topic's target (its end offsets) and its positions from
// the store (or drops what the store holds of its queues, if the topic is
// not the one the view read: another ID, or behind the view), and returns
// where to follow each partition from. id is the topic's ID, kept with
// the view. What the store holds is counted when first asked (count).
func (in *Inspector) start(t *topicView, ends map[int32]int64, id [16]byte) (map[int32]kgo.Offset, error) {
	t.target, t.pos = map[int32]int64{}, map[int32]int64{}
	rebuild, err := in.otherTopic(t.topic, id)
	if err != nil {
		return nil, err
	}
	for p, end := range ends {
		t.target[p] = end
		next, err := in.storedOffset(t.topic, p)
		if err != nil {
			return nil, err
		}
		if next > end {
			rebuild = true // the topic is not the one the view read
		}
		t.pos[p] = next
	}
	in.writeMu.Lock()
	defer in.writeMu.Unlock()
	stored := false
	for _, next := range t.pos {
		stored = stored || next > 0
	}
	switch {
	case rebuild:
		in.cfg.log.Warn("task records topic is not the one the view read (recreated?): rebuilding the view of its queues", "topic", t.topic)
		if err := in.dropTopic(t); err != nil {
			return nil, err
		}
		t.counted = true
	case !stored:
		t.counted = true // nothing stored: nothing to count
	}
	// Otherwise the store holds tasks of the topic (a view kept in a
	// directory): they are counted once counts are asked for (count), so
	// that a command that gets one task of a million does not read them
	// all.
	if id != ([16]byte{}) {
		if err := in.db.Set(topicIDKey(t.topic), id[:], pebble.NoSync); err != nil {
			return nil, in.dbErr(err)
		}
	}
	from := make(map[int32]kgo.Offset, len(t.pos))
	for p, next := range t.pos {
		from[p] = kgo.NewOffset().At(next)
	}
	return from, nil
}

// otherTopic reports whether the view holds the records of another topic
// of that name than the one of ID id (deleted and made again): a view
// without the ID, or a broker without IDs, says nothing.
func (in *Inspector) otherTopic(topic string, id [16]byte) (bool, error) {
	if id == ([16]byte{}) {
		return false, nil
	}
	v, closer, err := in.db.Get(topicIDKey(topic))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, in.dbErr(err)
	}
	defer closer.Close()
	return !bytes.Equal(v, id[:]), nil
}

// checkLoaded closes t.ready once every partition is read to its target.
// in.mu is held.
func (in *Inspector) checkLoaded(t *topicView) {
	if t.target == nil {
		return
	}
	for p, end := range t.target {
		if t.pos[p] < end {
			return
		}
	}
	t.target = nil
	close(t.ready)
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
	in.writeMu.Lock()
	defer in.writeMu.Unlock()
	in.mu.Lock()
	t := in.topics[topic]
	in.mu.Unlock()
	if t == nil {
		return nil // a load that failed: the next one reads again
	}
	// Each line's value is the line and its meta; its keys and index entry
	// are under 80 bytes more for IDs of UUID length.
	b := in.db.NewBatchWithSize(size + size/2)
	defer b.Close()
	touched := map[string]meta{} // this batch's records, newer than the store
	counts := map[string]*tally{}
	var finals [][]byte
	var attempts map[string]bool // the failed attempts this batch keeps
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
			if !t.holds(tr.Queue) {
				continue
			}
			queue := tr.Queue
			key := recordKey(queue, tr.ID)
			m := meta{state: stateIndex(tr.State), last: lastTime(tr, r.Timestamp), worker: tr.Worker != "", prio: byte(tr.Priority), due: dueOf(tr)}
			old, had, err := in.stored(t, key, touched)
			if err != nil {
				return err
			}
			if had && !m.supersedes(old) {
				continue // a producer's pending record never hides a worker's, nor a final one
			}
			m.retried = had && old.retried
			c := counts[queue]
			if c == nil {
				c = new(tally)
				counts[queue] = c
			}
			if tr.Worker != "" && tr.State == onceq.StateRetrying && tr.Attempt > 0 {
				// A failed attempt, kept for the task's history (Attempts).
				ak := attemptKey(queue, tr.ID, tr.Attempt)
				if !attempts[string(ak)] {
					known, err := in.hasKey(ak)
					if err != nil {
						return err
					}
					if !known {
						c.attempts++
					}
					if attempts == nil {
						attempts = map[string]bool{}
					}
					attempts[string(ak)] = true
				}
				m.retried = true
				if err := b.Set(ak, line, nil); err != nil {
					return err
				}
			}
			if had {
				c.add(old, -1)
				if err := b.Delete(indexKey(queue, old, tr.ID), nil); err != nil {
					return err
				}
				if old.due != 0 {
					if err := b.Delete(dueKey(queue, old.due, tr.ID), nil); err != nil {
						return err
					}
				}
			}
			c.add(m, 1)
			touched[string(key)] = m
			t.seen[xxhash.Sum64(key)] = struct{}{}
			// The line as it came: its meta, then its JSON.
			op := b.SetDeferred(len(key), metaLen+len(line))
			copy(op.Key, key)
			m.put(op.Value[:metaLen])
			copy(op.Value[metaLen:], line)
			if err := op.Finish(); err != nil {
				return err
			}
			if err := b.Set(indexKey(queue, m, tr.ID), []byte{m.prio}, nil); err != nil {
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
	for queue, c := range counts {
		t.queue(queue).counts.merge(c)
	}
	t.pos[partition] = next
	in.checkLoaded(t)
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
// topic's seen set has the key's hash, so that a new task's record, the
// usual case, costs no lookup; or while the topic is not counted (a view
// kept in a directory, whose seen set is made with its counts).
func (in *Inspector) stored(t *topicView, key []byte, touched map[string]meta) (meta, bool, error) {
	if m, ok := touched[string(key)]; ok {
		return m, true, nil
	}
	if _, ok := t.seen[xxhash.Sum64(key)]; !ok && t.counted {
		return meta{}, false, nil
	}
	return in.storedMeta(key)
}

// topicSpans are the key spans of one kind (prefix) of every queue of
// a records topic whose queue is owner: the owner's own keys, then those
// of its lane queues, owner/<label>.
func topicSpans(prefix byte, owner string) [][2][]byte {
	own := queuePrefix(prefix, owner)
	lanes := append(append([]byte{prefix}, owner...), onceq.LaneSep)
	return [][2][]byte{{own, prefixEnd(own)}, {lanes, prefixEnd(lanes)}}
}

// spanQueue is the queue of a key of topicSpans: what comes between
// the prefix byte and the zero byte that ends the queue's name.
func spanQueue(k []byte) (string, bool) {
	i := bytes.IndexByte(k, 0)
	if i < 1 {
		return "", false
	}
	return string(k[1:i]), true
}

// count counts what the store holds of t's queues, once (countTopic).
func (in *Inspector) count(t *topicView) error {
	in.writeMu.Lock()
	defer in.writeMu.Unlock()
	if t.counted {
		return nil
	}
	if err := in.countTopic(t); err != nil {
		return err
	}
	t.counted = true
	return nil
}

// countTopic counts the stored tasks of each of a topic's queues per
// state, from the index, and fills the topic's seen set from it. The
// counts replace those the records applied since the load had moved.
// in.writeMu is held.
func (in *Inspector) countTopic(t *topicView) error {
	// One pass over the index, whose entries hold the tasks' priorities,
	// finds every stored task (seen) and counts it, without reading its
	// record, a line of JSON.
	counts := map[string]*tally{}
	var rk []byte
	for _, sp := range topicSpans(prefixIndex, t.owner) {
		it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: sp[0], UpperBound: sp[1]})
		if err != nil {
			return in.dbErr(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			k := it.Key()
			queue, ok := spanQueue(k)
			if !ok || len(k) < len(queue)+11 || int(k[len(queue)+2]) >= len(onceq.TaskStates) {
				continue
			}
			c := counts[queue]
			if c == nil {
				c = new(tally)
				counts[queue] = c
			}
			m := meta{state: k[len(queue)+2]}
			id := k[len(queue)+11:]
			rk = append(append(append(append(rk[:0], prefixRecord), queue...), 0), id...)
			t.seen[xxhash.Sum64(rk)] = struct{}{}
			if v := it.Value(); len(v) == 1 && v[0] <= onceq.MaxPriority && !onceq.TaskStates[m.state].Final() {
				m.prio = v[0]
			}
			c.add(m, 1)
		}
		if err := it.Close(); err != nil {
			return in.dbErr(err)
		}
	}
	for _, sp := range topicSpans(prefixAttempt, t.owner) {
		it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: sp[0], UpperBound: sp[1]})
		if err != nil {
			return in.dbErr(err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			if queue, ok := spanQueue(it.Key()); ok {
				c := counts[queue]
				if c == nil {
					c = new(tally)
					counts[queue] = c
				}
				c.attempts++
			}
		}
		if err := it.Close(); err != nil {
			return in.dbErr(err)
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, q := range t.queues {
		q.counts = tally{}
	}
	for queue, c := range counts {
		t.queue(queue).counts = *c
	}
	return nil
}

// hasKey reports whether key is in the store.
func (in *Inspector) hasKey(key []byte) (bool, error) {
	_, closer, err := in.db.Get(key)
	if err == nil {
		closer.Close()
		return true, nil
	}
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	return false, in.dbErr(err)
}

// countKeys counts the stored keys under prefix.
func (in *Inspector) countKeys(prefix []byte) (int64, error) {
	it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, in.dbErr(err)
	}
	var n int64
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		return 0, in.dbErr(err)
	}
	return n, nil
}

// dropTopic forgets everything of a topic's queues, to read it again
// from the start. in.writeMu is held.
func (in *Inspector) dropTopic(t *topicView) error {
	for _, p := range []byte{prefixRecord, prefixIndex, prefixDue, prefixAttempt} {
		for _, sp := range topicSpans(p, t.owner) {
			if err := in.db.DeleteRange(sp[0], sp[1], pebble.NoSync); err != nil {
				return in.dbErr(err)
			}
		}
	}
	offsets := queuePrefix(prefixOffset, t.topic)
	if err := in.db.DeleteRange(offsets, prefixEnd(offsets), pebble.NoSync); err != nil {
		return in.dbErr(err)
	}
	for p := range t.pos {
		t.pos[p] = 0
	}
	in.mu.Lock()
	for _, q := range t.queues {
		q.counts = tally{}
	}
	in.mu.Unlock()
	clear(t.seen)
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
		// The sweep goes through the queues a topic's counts know.
		in.mu.Lock()
		ts := slices.Collect(maps.Values(in.topics))
		in.mu.Unlock()
		for _, tv := range ts {
			select {
			case <-tv.ready:
				if tv.err == nil {
					if err := in.count(tv); err != nil && in.ctx.Err() == nil {
						in.cfg.log.Warn("counting the tasks of a records topic", "topic", tv.topic, "err", err)
					}
				}
			default: // loading
			}
		}
		in.mu.Lock()
		var qs []*queueView
		for _, t := range in.topics {
			for _, q := range t.queues {
				qs = append(qs, q)
			}
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
	var counts tally
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
			m := meta{state: byte(i)}
			// Its priority, due time and failed attempts are in its
			// record's meta.
			sm, found, err := in.storedMeta(key)
			if err != nil {
				it.Close()
				return err
			}
			if found && !onceq.TaskStates[i].Final() {
				m.prio, m.due = sm.prio, sm.due
			}
			if m.due != 0 {
				if err := b.Delete(dueKey(q.queue, m.due, id), nil); err != nil {
					it.Close()
					return err
				}
			}
			if found && sm.retried {
				ap := attemptPrefix(q.queue, id)
				n, err := in.countKeys(ap)
				if err != nil {
					it.Close()
					return err
				}
				counts.attempts -= n
				if err := b.DeleteRange(ap, prefixEnd(ap), nil); err != nil {
					it.Close()
					return err
				}
			}
			if err := b.Delete(key, nil); err != nil {
				it.Close()
				return err
			}
			// Another ID of the same hash (one chance in 2^64 per pair)
			// would be looked up no more: its next record would leave
			// its old index entry behind, one task counted twice.
			delete(q.t.seen, xxhash.Sum64(key))
			counts.add(m, -1)
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
	q.counts.merge(&counts)
	in.mu.Unlock()
	return nil
}

// storedMeta returns the meta of the stored record at key; a record
// not found has the zero meta (the view is a cache: it is rebuilt from
// the records, and a missing record only counts at priority 0).
func (in *Inspector) storedMeta(key []byte) (meta, bool, error) {
	v, closer, err := in.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return meta{}, false, nil
	}
	if err != nil {
		return meta{}, false, in.dbErr(err)
	}
	defer closer.Close()
	m, _, err := decodeMeta(v)
	return m, err == nil, err
}
