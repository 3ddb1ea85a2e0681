package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/compactsched"
	"github.com/onceq/onceq/internal/ctltopic"
)

// Errors of the queries.
var (
	// ErrNotFound: the view holds no record of the task.
	ErrNotFound = errors.New("no record of the task: it was never submitted, was submitted without a record (a producer with records off) and has not run yet, or finished longer ago than the records are kept")
	// ErrNoQueue: the queue has no records topic: no producer or worker
	// with task records on has written to it, or the queue does not
	// exist.
	ErrNoQueue = errors.New("no task records for the queue: nothing with task records on (the default) has submitted to it or run its tasks yet, or the queue's name is wrong")
	// ErrClosed: the inspector was closed.
	ErrClosed = errors.New("inspect: closed")
)

// The view's Pebble memory: the block cache and one memtable (with the
// one being flushed, two at most).
const (
	viewCacheSize    = 64 << 20
	viewMemTableSize = 64 << 20
)

// noQueueRetry is how often Wait looks again for a queue without task
// records.
const noQueueRetry = time.Second

// Limits of List.
const (
	DefaultLimit = 100
	MaxLimit     = 10_000
)

// Inspector answers what happened to tasks, from a view of the queues'
// task records that it keeps up to date. It is safe for concurrent use:
// open one per process and share it.
type Inspector struct {
	cfg config
	db  *pebble.DB
	adm *broker.Admin

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// writeMu orders the view's writers: the follower and the sweep.
	writeMu sync.Mutex

	mu      sync.Mutex
	closed  bool
	cl      *kgo.Client                // follows the records topics; made by the first load
	topics  map[string]*topicView      // by records topic
	waiters map[string][]chan struct{} // recordKey -> waiters of a final state
	// recent holds the records Expect was told of that the view has not
	// read back yet, by recordKey.
	recent map[string]recentSubmit

	controlMu sync.Mutex
	control   *ctltopic.Reader // follows the control topic, opened on first use
}

// topicView is the view of one records topic: of its own queue and, for a
// lane, of every lane queue on it.
type topicView struct {
	topic  string
	owner  string        // the queue whose records topic it is: the lane of lane queues
	ready  chan struct{} // closed once loaded, or failed (err)
	err    error
	target map[int32]int64 // the end offsets to reach to be loaded
	pos    map[int32]int64 // the next offset of each partition, as applied
	// queues holds the view of each queue with records in the topic, and
	// of each queue asked about; in.mu guards it.
	queues map[string]*queueView
	// seen holds the hashes of the keys of the topic's records in the
	// store (see stored). The view's writers own it. counted: seen and
	// the queues' counts cover what the store held when the topic was
	// loaded (countTopic), which a view kept in a directory does only
	// once its counts are asked for (count); in.writeMu guards it.
	seen    map[uint64]struct{}
	counted bool
}

// queueView is the view of one queue's records, in its topic's view.
type queueView struct {
	queue  string
	t      *topicView
	counts tally // in.mu guards it
}

// Open opens an inspector. It reads nothing until a queue is first asked
// about.
func Open(opts ...Opt) (*Inspector, error) {
	cfg, err := build(opts)
	if err != nil {
		return nil, err
	}
	cache := pebble.NewCache(viewCacheSize)
	defer cache.Unref()
	popts := &pebble.Options{Logger: quietLogger{}, Cache: cache, MemTableSize: viewMemTableSize,
		FormatMajorVersion: pebble.FormatValueSeparation,
		// A restore writes a queue's records at the topic's pace: L0 may
		// hold more before it is compacted, so that the restore rewrites
		// them fewer times.
		L0CompactionThreshold: 8, L0StopWritesThreshold: 48, LBaseMaxBytes: 256 << 20}
	for i := range popts.Levels {
		// A new task's record is looked up before it is written: the
		// filters make that miss one probe per sstable.
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	popts.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionFastest })
	// The view is rebuilt from the records topics: it needs no WAL. A
	// batch (a fetch's records with their partition's next offset) lands
	// in one memtable, so a store that lost its memtables to a crash
	// resumes from the offsets of what it flushed.
	popts.DisableWAL = true
	popts.Experimental.CompactionScheduler = compactsched.New() // rests while the view is idle
	dir := cfg.dir
	if dir == "" {
		popts.FS, dir = vfs.NewMem(), "view"
	}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		return nil, fmt.Errorf("inspect: opening the view in %s: %w", dir, err)
	}
	if err := checkFormat(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("inspect: the view in %s: %w", dir, err)
	}
	adm, err := broker.NewAdmin(cfg.conn)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("inspect: %w", err)
	}
	in := &Inspector{cfg: cfg, db: db, adm: adm, topics: map[string]*topicView{}, waiters: map[string][]chan struct{}{},
		recent: map[string]recentSubmit{}}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	in.wg.Add(1)
	go in.sweepLoop()
	return in, nil
}

// Close stops following the records and closes the view. Queries after
// Close fail with ErrClosed; waiters return it.
func (in *Inspector) Close() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil
	}
	in.closed = true
	for k, ws := range in.waiters {
		for _, w := range ws {
			close(w)
		}
		delete(in.waiters, k)
	}
	cl := in.cl
	in.mu.Unlock()
	in.cancel()
	if cl != nil {
		// Partitions purged first: a metadata update during Close would
		// assign them again and start a fetch beside the client's own
		// ending of its fetch session. The purge waits for the client's
		// metadata loop, which a broker that went away holds up: Close
		// waits for it a second at most.
		purged := make(chan struct{})
		go func() {
			defer close(purged)
			cl.PurgeTopicsFromConsuming(cl.GetConsumeTopics()...)
		}()
		select {
		case <-purged:
		case <-time.After(time.Second):
		}
		cl.Close()
	}
	in.controlMu.Lock()
	if in.control != nil {
		in.control.Close()
	}
	in.controlMu.Unlock()
	in.wg.Wait()
	in.adm.Close()
	// Without a WAL, what the memtable holds is kept by a flush only.
	var err error
	if in.cfg.dir != "" {
		err = in.db.Flush()
	}
	return errors.Join(err, in.db.Close())
}

// Get returns the task's last record: its state, attempt, times, error
// and result. A task without one is ErrNotFound. A record the view was
// told of with Expect (a task ctltopic.SubmitUnique submitted through this
// Inspector) is found at once, as submitted, even before the view read it
// back from the brokers.
func (in *Inspector) Get(ctx context.Context, queue, id string) (onceq.TaskRecord, error) {
	if err := onceq.ValidateID(id); err != nil {
		return onceq.TaskRecord{}, err
	}
	_, err := in.view(ctx, queue)
	if err != nil && !errors.Is(err, ErrNoQueue) {
		return onceq.TaskRecord{}, err
	}
	var r onceq.TaskRecord
	if err == nil {
		if r, err = in.get(queue, id); !errors.Is(err, ErrNotFound) {
			return r, err
		}
	}
	in.mu.Lock()
	rs, ok := in.recent[string(recordKey(queue, id))]
	in.mu.Unlock()
	if ok && in.cfg.now().Sub(rs.at) < recentTTL {
		return rs.rec, nil
	}
	if !ok && !errors.Is(err, ErrNoQueue) {
		// The view drops a submission from recent once it has stored
		// the record: it may have done so since the read above.
		return in.get(queue, id)
	}
	return r, err
}

// recentSubmit is a record Expect was told of.
type recentSubmit struct {
	at  time.Time
	rec onceq.TaskRecord
}

// recentTTL is how long the view answers with a record Expect was told
// of and has not read back (it drops it as soon as it does).
const recentTTL = time.Minute

// Expect tells the view of task records written that it may not have read
// back yet (ctltopic.SubmitUnique's pending records): Get answers with
// them, as if read, until the view reads them or a minute has passed.
func (in *Inspector) Expect(recs ...onceq.TaskRecord) {
	now := in.cfg.now()
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range recs {
		in.recent[string(recordKey(r.Queue, r.ID))] = recentSubmit{at: now, rec: r}
	}
}

// Conn is how the inspector reaches the brokers.
func (in *Inspector) Conn() broker.Conn { return in.cfg.conn }

// Retention is how long a finished task stays in the view (the Retention
// option): the workers' dedup window and result retention.
func (in *Inspector) Retention() time.Duration { return in.cfg.retention }

// get reads a task's record from the view.
func (in *Inspector) get(queue, id string) (onceq.TaskRecord, error) {
	v, closer, err := in.db.Get(recordKey(queue, id))
	if errors.Is(err, pebble.ErrNotFound) {
		return onceq.TaskRecord{}, fmt.Errorf("inspect: task %s of %s: %w", id, queue, ErrNotFound)
	}
	if err != nil {
		return onceq.TaskRecord{}, in.dbErr(err)
	}
	defer closer.Close()
	m, line, err := decodeMeta(v)
	if err != nil {
		return onceq.TaskRecord{}, err
	}
	if m.last < in.cutoff() {
		return onceq.TaskRecord{}, fmt.Errorf("inspect: task %s of %s: %w", id, queue, ErrNotFound)
	}
	return onceq.DecodeTaskRecord(line)
}

// Wait returns the task's record once it is in a final state (succeeded,
// dead, expired or canceled), at once if it already is. The view wakes it
// when it applies the record, read as soon as the commit that wrote it
// ends: no polling. A queue without task records yet (no worker started
// for it) is looked for again every second. It returns ctx's error if ctx
// ends first.
func (in *Inspector) Wait(ctx context.Context, queue, id string) (onceq.TaskRecord, error) {
	return in.WaitFor(ctx, queue, id, func(r onceq.TaskRecord) bool { return true })
}

// WaitFor is Wait for a final record that also satisfies ok: a caller
// that knows which run it waits for (by its record's Partition and
// Offset, say) skips the final record of an earlier one, such as the
// dead letter of a task requeued since.
func (in *Inspector) WaitFor(ctx context.Context, queue, id string, ok func(onceq.TaskRecord) bool) (onceq.TaskRecord, error) {
	if err := onceq.ValidateID(id); err != nil {
		return onceq.TaskRecord{}, err
	}
	for {
		_, err := in.view(ctx, queue)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNoQueue) {
			return onceq.TaskRecord{}, err
		}
		select {
		case <-time.After(noQueueRetry):
		case <-ctx.Done():
			return onceq.TaskRecord{}, fmt.Errorf("inspect: waiting for task %s of %s: %w (%w)", id, queue, ctx.Err(), ErrNoQueue)
		}
	}
	key := string(recordKey(queue, id))
	for {
		ch := make(chan struct{})
		in.mu.Lock()
		if in.closed {
			in.mu.Unlock()
			return onceq.TaskRecord{}, ErrClosed
		}
		in.waiters[key] = append(in.waiters[key], ch)
		in.mu.Unlock()
		// Registered first, looked second: a record applied in between
		// wakes ch.
		r, err := in.get(queue, id)
		if err == nil && r.State.Final() && ok(r) {
			in.dropWaiter(key, ch)
			return r, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			in.dropWaiter(key, ch)
			return r, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			in.dropWaiter(key, ch)
			return onceq.TaskRecord{}, fmt.Errorf("inspect: waiting for task %s of %s: %w", id, queue, ctx.Err())
		}
	}
}

func (in *Inspector) dropWaiter(key string, ch chan struct{}) {
	in.mu.Lock()
	defer in.mu.Unlock()
	ws := in.waiters[key]
	if i := slices.Index(ws, ch); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
	}
	if len(ws) == 0 {
		delete(in.waiters, key)
	} else {
		in.waiters[key] = ws
	}
}

// wake wakes the waiters of a task whose record became final. in.mu is
// held.
func (in *Inspector) wake(key []byte) {
	ws, ok := in.waiters[string(key)]
	if !ok {
		return
	}
	for _, w := range ws {
		close(w)
	}
	delete(in.waiters, string(key))
}

// Filter chooses the tasks List returns.
type Filter struct {
	// States are the states to list; none lists every state.
	States []onceq.TaskState
	// Since and Until bound the time of the tasks' last transition; zero
	// leaves the bound open.
	Since, Until time.Time
	// Limit is the most tasks a page holds, 1 to MaxLimit; 0 is
	// DefaultLimit.
	Limit int
	// After is the Next of the previous page; "" starts at the newest.
	After string
}

// Page is one page of List: tasks newest first by their last transition,
// then by ID.
type Page struct {
	Tasks []onceq.TaskRecord
	// Next continues the listing (Filter.After); "" on the last page.
	Next string
}

// List returns a page of a queue's tasks by state and time, newest first.
func (in *Inspector) List(ctx context.Context, queue string, f Filter) (Page, error) {
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	if f.Limit < 1 || f.Limit > MaxLimit {
		return Page{}, fmt.Errorf("inspect: limit %d: want 1 to %d", f.Limit, MaxLimit)
	}
	var after *cursor
	if f.After != "" {
		c, err := parseCursor(f.After)
		if err != nil {
			return Page{}, err
		}
		after = &c
	}
	states := f.States
	if len(states) == 0 {
		states = onceq.TaskStates
	}
	for _, s := range states {
		if _, err := onceq.ParseTaskState(string(s)); err != nil {
			return Page{}, err
		}
	}
	if _, err := in.view(ctx, queue); err != nil {
		return Page{}, err
	}
	since := max(in.cutoff(), f.Since.UnixMilli())
	if f.Since.IsZero() {
		since = in.cutoff()
	}
	until := int64(1<<63 - 1)
	if !f.Until.IsZero() {
		until = f.Until.UnixMilli()
	}
	type hit struct {
		last int64
		id   string
	}
	var hits []hit
	for _, s := range slices.Compact(slices.Sorted(slices.Values(states))) {
		prefix := indexPrefix(queue, stateIndex(s))
		it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return Page{}, in.dbErr(err)
		}
		n := 0
		for ok := it.Last(); ok && n <= f.Limit; ok = it.Prev() {
			last, id := indexID(it.Key(), len(prefix))
			if last < since {
				break
			}
			if last > until || after != nil && !after.before(last, id) {
				continue
			}
			hits = append(hits, hit{last, id})
			n++
		}
		if err := it.Close(); err != nil {
			return Page{}, in.dbErr(err)
		}
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if a.last != b.last {
			return int(min(max(b.last-a.last, -1), 1))
		}
		return cmpStrings(b.id, a.id)
	})
	var page Page
	for i, h := range hits {
		if i == f.Limit {
			last := hits[i-1]
			page.Next = cursor(last).String()
			break
		}
		if err := in.appendTask(&page, queue, h.id); err != nil {
			return Page{}, err
		}
	}
	return page, nil
}

// appendTask appends a task's record to a page, unless it was swept since
// its index entry was read.
func (in *Inspector) appendTask(page *Page, queue, id string) error {
	r, err := in.get(queue, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err == nil {
		page.Tasks = append(page.Tasks, r)
	}
	return err
}

// Attempts returns a task's history, one record per attempt, oldest
// first: each run that failed and was retried (its start, end and error,
// as the worker recorded it), then the task's last record, as Get
// returns it (its last attempt, or what it waits for). A task that never
// failed has its last record alone. A task without a record is
// ErrNotFound.
func (in *Inspector) Attempts(ctx context.Context, queue, id string) ([]onceq.TaskRecord, error) {
	last, err := in.Get(ctx, queue, id)
	if err != nil {
		return nil, err
	}
	prefix := attemptPrefix(queue, id)
	it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, in.dbErr(err)
	}
	defer it.Close()
	var out []onceq.TaskRecord
	for ok := it.First(); ok; ok = it.Next() {
		r, err := onceq.DecodeTaskRecord(it.Value())
		if err != nil {
			return nil, fmt.Errorf("inspect: a stored attempt of %s: %w: rebuild the view (remove its directory)", id, err)
		}
		if r.Attempt < last.Attempt || r.Attempt == last.Attempt && last.State != onceq.StateRetrying {
			out = append(out, r)
		}
	}
	return append(out, last), nil
}

// ListDue returns a page of a queue's tasks waiting for their due time
// (scheduled, and retrying in the delay buckets), soonest first, then by
// ID, from the view's index of due times: the order they will run in.
// Overdue tasks, due and not started yet, come first. Filter's Limit and
// After work as for List; its States, Since and Until are not used.
func (in *Inspector) ListDue(ctx context.Context, queue string, f Filter) (Page, error) {
	if f.Limit == 0 {
		f.Limit = DefaultLimit
	}
	if f.Limit < 1 || f.Limit > MaxLimit {
		return Page{}, fmt.Errorf("inspect: limit %d: want 1 to %d", f.Limit, MaxLimit)
	}
	prefix := queuePrefix(prefixDue, queue)
	lower := prefix
	var after *cursor
	if f.After != "" {
		c, err := parseCursor(f.After)
		if err != nil {
			return Page{}, err
		}
		after, lower = &c, dueKey(queue, c.last, c.id)
	}
	if _, err := in.view(ctx, queue); err != nil {
		return Page{}, err
	}
	it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return Page{}, in.dbErr(err)
	}
	defer it.Close()
	var page Page
	for ok := it.First(); ok; ok = it.Next() {
		due, id := indexID(it.Key(), len(prefix))
		if after != nil && due == after.last && id == after.id {
			continue // the previous page's last
		}
		if len(page.Tasks) == f.Limit {
			last := page.Tasks[len(page.Tasks)-1]
			page.Next = cursor{dueOf(&last), last.ID}.String()
			break
		}
		if err := in.appendTask(&page, queue, id); err != nil {
			return Page{}, err
		}
	}
	return page, nil
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Counts returns how many of a queue's retained tasks are in each state.
func (in *Inspector) Counts(ctx context.Context, queue string) (map[onceq.TaskState]int64, error) {
	counts, err := in.CountsOf(ctx, []string{queue})
	if err != nil {
		return nil, err
	}
	return counts[0], nil
}

// CountsOf is Counts of each of queues, in their order; the queues not
// read yet are loaded together (one metadata and one ListOffsets request
// for all of them). Its error is the first queue's that failed.
func (in *Inspector) CountsOf(ctx context.Context, queues []string) ([]map[onceq.TaskState]int64, error) {
	ts, err := in.tallies(ctx, queues)
	if err != nil {
		return nil, err
	}
	out := make([]map[onceq.TaskState]int64, len(ts))
	for i, t := range ts {
		out[i] = t.byState()
	}
	return out, nil
}

// tallies returns the counts of each of queues, loading them as CountsOf.
func (in *Inspector) tallies(ctx context.Context, queues []string) ([]tally, error) {
	qs, errs := in.views(ctx, queues)
	if err := cmp.Or(errs...); err != nil {
		return nil, err
	}
	for _, q := range qs {
		if err := in.count(q.t); err != nil {
			return nil, err
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]tally, len(qs))
	for i, q := range qs {
		out[i] = q.counts
	}
	return out, nil
}

// Queues lists the queues that have task records, sorted: the users'
// queues, without onceq's own (onceq.WorkflowQueue, whose tasks are
// workflows: see package workflow). It names the queue of each records
// topic, from the brokers' list of topics, without reading any: the lane
// queues of a lane are listed by LaneQueues.
func (in *Inspector) Queues(ctx context.Context) ([]string, error) {
	topics, err := in.adm.ListTopics(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("inspect: listing the records topics: %w", err)
	}
	var out []string
	for _, t := range topics {
		if q, ok := broker.QueueOfRecords(t); ok && q != onceq.WorkflowQueue {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out, nil
}

// LaneQueues lists, sorted, the lane queues of lane with retained tasks:
// the labels the view of the lane's records topic holds a task of.
func (in *Inspector) LaneQueues(ctx context.Context, lane string) ([]string, error) {
	if err := onceq.ValidateQueue(lane); err != nil {
		return nil, err
	}
	q, err := in.view(ctx, lane)
	if err != nil {
		return nil, err
	}
	if err := in.count(q.t); err != nil {
		return nil, err
	}
	out := in.laneNames(lane)
	slices.Sort(out)
	return out, nil
}

// laneNames names the lane queues of lane with retained tasks in its view,
// in no order; none if the view is not loaded or lane is a lane queue.
func (in *Inspector) laneNames(lane string) []string {
	var out []string
	in.eachLaneQueue(lane, func(name string, _ *queueView) { out = append(out, name) })
	return out
}

// laneTally sums the counts of lane's lane queues with retained tasks in
// its view, and says how many there are, as laneNames finds them.
func (in *Inspector) laneTally(lane string) (sum tally, n int) {
	in.eachLaneQueue(lane, func(_ string, q *queueView) {
		sum.merge(&q.counts)
		n++
	})
	return sum, n
}

// eachLaneQueue calls fn, with in.mu held, for each lane queue of lane
// with retained tasks in its view.
func (in *Inspector) eachLaneQueue(lane string, fn func(name string, q *queueView)) {
	if onceq.IsLaneQueue(lane) {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	t := in.topics[broker.RecordsTopic(lane)]
	if t == nil {
		return
	}
	for name, lq := range t.queues {
		if name != lane && lq.any() {
			fn(name, lq)
		}
	}
}

// any reports whether the view holds a task of q. in.mu is held.
func (q *queueView) any() bool {
	for _, n := range q.counts.states {
		if n > 0 {
			return true
		}
	}
	return false
}

// cutoff is the oldest last transition the view shows, in unix ms.
func (in *Inspector) cutoff() int64 { return in.cfg.now().Add(-in.cfg.retention).UnixMilli() }

func (in *Inspector) dbErr(err error) error {
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return fmt.Errorf("inspect: reading the view: %w", err)
}

// quietLogger keeps Pebble's informational logs out of the process's.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
