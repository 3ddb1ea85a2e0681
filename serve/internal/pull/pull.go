package pull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/limit"
)

// pullPattern matches the namespaces' queues: <namespace>.<queue>.
const pullPattern = `[A-Za-z0-9_-]+\.[A-Za-z0-9-]+`

// legacyQueue matches a topic of pullPattern.
var legacyQueue = regexp.MustCompile(`^(?:` + pullPattern + `)$`)

// HoldMax bounds how long a worker's task waits for a consumer, plus its
// time-to-run: the worker's task timeout. A consume's time-to-run is at
// most half of it.
const HoldMax = 24 * time.Hour

// ReleaseAfter is how long a task waits for a consumer after the worker's
// last want of its queue ended before it goes back to its queue
// (Config.ReleaseAfter, which tests shorten).
const ReleaseAfter = 30 * time.Second

// laneReturn is how long a lane queue's task that no HTTP consumer asked
// for waits in the delay topics before it is back in its lane: the task
// reached the handler because its queue's line of tasks waiting for a
// consumer (consumer.OnDemandLine) was full.
const laneReturn = 10 * time.Second

// WantGrace keeps a queue fetched a little past a consume's timeout, so
// that a consumer polling again finds what was fetched for the last one.
const WantGrace = 10 * time.Second

// pullQuietAfter is the pull worker's QuietAfter: every fetch names every
// partition it follows, and a queue's consumers keep it wanted, so a
// queue stops being fetched soon after its last task; a publish wakes it
// (broker.WakeEvery is 250 ms).
const pullQuietAfter = 600 * time.Millisecond

// errTTR fails a task not acknowledged within its time-to-run.
var errTTR = errors.New("not acknowledged within its time-to-run (ttr)")

// lease is a task a worker's handler offers to the HTTP consumers: the
// consumer that takes it sends its terms, and the handler answers once its
// take counted in the lease topic (lease.go), or did not.
type lease struct {
	task  *consumer.Task
	terms chan Terms     // the consumer's terms, sent once it took it
	reply chan takeReply // the handler's answer
	// priority and ready, when the task became ready to run, place it
	// in its queue's hand-out order (offers), at index.
	priority int
	ready    time.Time
	index    int
}

// newLease is the lease of t's run.
func newLease(t *consumer.Task) *lease {
	return &lease{task: t, terms: make(chan Terms, 1), reply: make(chan takeReply, 1), priority: t.Priority,
		ready: laterOf(t.Enqueued, t.Due), index: -1}
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Terms are what a consumer takes a task for: its time-to-run and
// whether the take spends one of the task's tries (lmstfy's freeze_tries).
type Terms struct {
	TTR    time.Duration
	Freeze bool
	// placeBy bounds the wait for the job's place under its queue's
	// limit (handOut); zero: placeTry from the take.
	placeBy time.Time
}

// takeReply says whether a take counted: its lease, or none (another take
// or an acknowledgment came first, or err).
type takeReply struct {
	lease string
	err   error
}

// Pull is a server's pull worker and what it hands out: open it with
// Open, start its worker with Start, and release it with Stop, then
// Close.
type Pull struct {
	// w is the worker running now, or the last one (pullworker.go): a
	// worker that stops is replaced by a new one.
	w      atomic.Pointer[consumer.Worker]
	ledger *ledger // the group's leases
	adm    *broker.Admin
	life   workerLife

	// fleet counts the members of the pull group, looked at every
	// fleetEvery: with one, no server's consumers wait elsewhere.
	fleet atomic.Int32
	// group is the pull group, and instance this server's member of it
	// (its pull worker's instance ID), set before the worker starts;
	// failover looks for its dead members (failover.go), removals
	// counts those removed.
	group    string
	instance string
	failover failover
	removals prometheus.Counter
	log      *slog.Logger

	cfg Config
	// releaseAfter is the config's: the constant ReleaseAfter unless a
	// test shortened it.
	releaseAfter time.Duration
	// lane is the server's lane (empty: a topic per queue): the jobs of
	// a queue's topic <ns>.<queue> move to its lane queue (legacy.go),
	// legacy the set of such topics.
	lane   string
	legacy atomic.Pointer[map[string]bool]

	mu     sync.Mutex
	queues map[string]*Queue // by topic: the queues asked for or run
	known  map[string]bool   // topics known to exist
	// remote are the other servers' wants, by topic (wantRemote): a
	// worker that starts is told them (wantAll).
	remote      map[string]time.Time
	remoteSwept int // remote's size after its last sweep of the wants past

	limits *limit.Client  // the queues' limits, and the hand-outs' places
	quit   chan struct{}  // closed when the server closes
	runs   map[string]int // by lease key: the handlers running the task now
}

// Queue is a queue whose tasks the server hands out.
type Queue struct {
	topic  string
	offers offers // its tasks offered to the server's consumers
	// published is when this server last published to the queue, and
	// offered when it last offered one of its jobs (Unix nanoseconds): a
	// consume of several queues waits a moment for a job of an earlier
	// one on its way, published since (take).
	published, offered atomic.Int64
	wanted             atomic.Int64 // Unix nanoseconds until which a consumer waits
	// fetched is when the worker's last want of the queue ends (Unix
	// nanoseconds): this server's consumers', another server's, or an
	// acknowledgment's, whose task's run must be fetched. A task goes
	// back to its queue releaseAfter past it, so that the worker no
	// longer fetches it then and it stays there.
	fetched atomic.Int64
	// waiting counts the consumers waiting for the queue now (with a
	// timeout): their want is told to the other servers again when the
	// queue's partitions move (reannounce).
	waiting atomic.Int32
}

// Wait counts a consumer waiting for the queue, with a timeout, until
// done is called: its want is told to the other servers again while it
// waits (reannounce).
func (q *Queue) Wait() (done func()) {
	q.waiting.Add(1)
	return func() { q.waiting.Add(-1) }
}

func (q *Queue) wantedUntil() time.Time  { return time.Unix(0, q.wanted.Load()) }
func (q *Queue) fetchedUntil() time.Time { return time.Unix(0, q.fetched.Load()) }

// raiseTo sets v to until, in Unix nanoseconds, if that is later.
func raiseTo(v *atomic.Int64, until time.Time) {
	for {
		old := v.Load()
		if old >= until.UnixNano() || v.CompareAndSwap(old, until.UnixNano()) {
			return
		}
	}
}

func leaseKey(topic, id string) string { return topic + "\x00" + id }

// cutLeaseKey splits a lease key into its topic and ID.
func cutLeaseKey(k string) (topic, id string, ok bool) { return strings.Cut(k, "\x00") }

// queue returns topic's Queue, making it the first time.
func (pl *Pull) queue(topic string) *Queue {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	q := pl.queues[topic]
	if q == nil {
		q = &Queue{topic: topic}
		pl.queues[topic] = q
	}
	return q
}

// Published notes that this server is publishing to topic's queue.
func (pl *Pull) Published(topic string) {
	pl.queue(topic).published.Store(time.Now().UnixNano())
}

// Offered is how many tasks of topic the server's handlers offer to its
// consumers now.
func (pl *Pull) Offered(topic string) int { return pl.queue(topic).offers.len() }

// Owns says whether the pull worker owns a partition of topic now.
func (pl *Pull) Owns(topic string) bool { return pl.w.Load().Owns(topic) }

// TaskLease is what the lease topic says of a task: whether it is handed
// out (Taken: its run at Partition and Offset, Freeze: without spending
// a try) or acknowledged.
type TaskLease struct {
	Taken, Acked, Freeze bool
	Partition            int32
	Offset               int64
}

// LeaseOf returns what the lease topic says of queue's task id, as this
// server read it; ok is false if it says nothing.
func (pl *Pull) LeaseOf(queue, id string) (l TaskLease, ok bool) {
	st, ok := pl.ledger.state(leaseKey(queue, id))
	return TaskLease{Taken: st.Taken, Acked: st.Acked, Freeze: st.Freeze, Partition: st.Partition, Offset: st.Offset}, ok
}

// CancelLease writes that queue's task id, not handed out, never is:
// handedOut says a consumer took it (or acknowledged it) first, and then
// the cancel did not count.
func (pl *Pull) CancelLease(ctx context.Context, queue, id string) (handedOut bool, err error) {
	counted, st, err := pl.ledger.write(ctx, leaseKey(queue, id), leaseEvent{Kind: evCancel})
	if err != nil {
		return false, err
	}
	return !counted && (st.Taken || st.Acked), nil
}

// track counts a handler running the task of lease key until done is
// called.
func (pl *Pull) track(key string) (done func()) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.runs == nil {
		pl.runs = map[string]int{}
	}
	pl.runs[key]++
	return func() {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		if pl.runs[key]--; pl.runs[key] == 0 {
			delete(pl.runs, key)
		}
	}
}

// running reports whether a handler of this server runs the task of lease
// key now.
func (pl *Pull) running(key string) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.runs[key] > 0
}

// Want says that a consumer waits for topic until until: the worker
// fetches it, and its tasks wait for consumers.
func (pl *Pull) Want(topic string, until time.Time) *Queue {
	q := pl.queue(topic)
	raiseTo(&q.wanted, until)
	raiseTo(&q.fetched, until)
	if w := pl.w.Load(); w != nil {
		pl.tell(w, topic, until)
	}
	return q
}

// Announce tells the other servers of the group that this one waits for
// topic until until (ledger.announce), when its partitions may be
// another server's.
func (pl *Pull) Announce(topic string, until time.Time, fetch bool) {
	if w := pl.w.Load(); w != nil && (pl.fleet.Load() > 1 || !w.Owns(topic)) {
		pl.ledger.announce(topic, until, fetch)
	}
}

// reannounceEvery is how often a server tells the others again of the
// queues its consumers wait for: the partitions of a queue it owned when
// a consumer came, so that it told no one, may have moved since.
const reannounceEvery = 500 * time.Millisecond

// reannounce announces, every reannounceEvery until ctx ends, the queues
// consumers of this server wait for. A want already written is not
// written again (ledger.announce).
func (pl *Pull) reannounce(ctx context.Context) {
	t := time.NewTicker(reannounceEvery)
	defer t.Stop()
	var wanted map[string]time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		clear(wanted)
		pl.mu.Lock()
		for topic, q := range pl.queues {
			if q.waiting.Load() > 0 {
				if wanted == nil {
					wanted = map[string]time.Time{}
				}
				wanted[topic] = q.wantedUntil()
			}
		}
		pl.mu.Unlock()
		for topic, until := range wanted {
			pl.Announce(topic, until, false)
		}
		if len(wanted) > 0 && pl.fleet.Load() > 1 {
			// Their jobs may be a dead server's (failover.go).
			pl.suspect()
		}
	}
}

// handle is the worker's handler: it offers the task to consumers, and
// once one took it, waits for its acknowledgment (from any server) or the
// end of its time-to-run. A run of a task that was handed out before (by
// a server that stopped, or lost the task's partition) finds its lease
// and does the same, without handing the task out again: if this server
// has not read that lease yet, the take of its offer does not count (the
// topic's order decides), and by then it has read it.
func (pl *Pull) handle(ctx context.Context, t *consumer.Task) error {
	lg := pl.ledger
	key := leaseKey(t.Queue, t.ID)
	defer pl.track(key)()
	// Offered, the job waits for a consumer: it runs (in its record)
	// once one took it.
	t.AwaitsStart()
	for {
		st, ok, changed := lg.watch(key)
		var end bool
		var err error
		switch {
		case ok && st.Acked:
			lg.unwatch(key, changed)
			if len(st.Result) > 0 {
				return t.SetResult(st.Result)
			}
			return nil
		case ok && st.Taken:
			// Handed out: the job waits for its consumer, not for a place of
			// its queue's --pull-slots, which the queue's next job takes.
			t.YieldQueuePlace()
			t.WorkStarts()
			end, err = pl.hold(ctx, key, st, changed)
		case ok && st.Granted:
			end, err = pl.awaitGrant(ctx, t.Queue, key, st, changed)
		case ok && st.Canceled:
			// A DELETE canceled it before any take: it is offered no
			// more, and the cancel the DELETE wrote to the control topic
			// ends this run canceled.
			select {
			case <-changed:
			case <-ctx.Done():
				lg.unwatch(key, changed)
				return ctx.Err()
			}
		case ok && st.Expired && st.Ended == (runRef{t.Partition, t.Offset}):
			// This run's lease expired before a restart: the try is spent.
			lg.unwatch(key, changed)
			return ttrError(st)
		case pl.movesToLane(t.Queue):
			lg.unwatch(key, changed)
			return pl.moveToLane(t)
		default:
			end, err = pl.offer(ctx, t, key, changed)
		}
		if end {
			return err
		}
	}
}

// hold waits while the lease st is open: for a change of it, or for the
// end of its time-to-run, when it writes the lease's expiry. end says the
// run is over, with err.
func (pl *Pull) hold(ctx context.Context, key string, st leaseState, changed <-chan struct{}) (end bool, err error) {
	first, counted, err := pl.endAt(ctx, key, st.Until, changed, leaseEvent{Kind: evExpire, Lease: st.Lease})
	switch {
	case err != nil:
		return true, err
	case first || !counted:
		return false, nil // changed, or acknowledged first
	}
	return true, ttrError(st)
}

// endAt waits for key's state to change (first) or for until, when it
// writes ev and reports whether it counted. An error is the run's.
func (pl *Pull) endAt(ctx context.Context, key string, until time.Time, changed <-chan struct{}, ev leaseEvent) (first, counted bool, err error) {
	lg := pl.ledger
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-changed:
		return true, false, nil
	case <-ctx.Done():
		lg.unwatch(key, changed)
		return false, false, ctx.Err()
	case <-timer.C:
	}
	lg.unwatch(key, changed)
	counted, _, err = lg.write(ctx, key, ev)
	if err != nil {
		return false, false, runError(ctx, err)
	}
	return false, counted, nil
}

// ttrError is how a run ends whose lease expired: failed, or snoozed when
// taken with freeze_tries (the run counts no attempt, and the task is
// offered again at once).
func ttrError(st leaseState) error {
	if st.Freeze {
		return consumer.Snooze(0, fmt.Sprintf("%v: %v (freeze_tries: no try spent)", errTTR, st.TTR))
	}
	return fmt.Errorf("%w: %v", errTTR, st.TTR)
}

// offer offers t to the server's consumers, in its queue's hand-out
// order, until one takes it, and writes the take. end says the run is
// over, with err. A task no consumer asked for goes back to its queue
// (released, its try unspent) releaseAfter after the worker's last want of
// the queue ended: the worker fetches the queue no more by then, so the
// task stays there, and it holds no place in the worker while nobody
// consumes it.
func (pl *Pull) offer(ctx context.Context, t *consumer.Task, key string, changed <-chan struct{}) (end bool, err error) {
	lg := pl.ledger
	q := pl.queue(t.Queue)
	l := newLease(t)
	q.offers.put(l)
	q.offered.Store(time.Now().UnixNano())
	for {
		idle := time.NewTimer(time.Until(q.fetchedUntil().Add(pl.releaseAfter)))
		// Another server's consumers wait for the queue: the task goes to
		// them unless one of this server's takes it within remoteAfter.
		var remote <-chan time.Time
		holder, elsewhere, more := lg.wantedElsewhere(t.Queue)
		if elsewhere {
			remote = time.After(remoteAfter)
		}
		// Each way out but a take withdraws the offer first; a consumer
		// that took it before that has its take written.
		select {
		case g := <-l.terms:
			idle.Stop()
			return pl.answer(ctx, key, l, g)
		case <-remote:
			idle.Stop()
			if !q.offers.withdraw(l) {
				return pl.answer(ctx, key, l, <-l.terms)
			}
			lg.unwatch(key, changed)
			return pl.grant(ctx, t, key, holder)
		case <-more:
		case <-idle.C:
			if !elsewhere && !time.Now().Before(q.fetchedUntil().Add(pl.releaseAfter)) {
				if !q.offers.withdraw(l) {
					return pl.answer(ctx, key, l, <-l.terms)
				}
				lg.unwatch(key, changed)
				return true, goBack(t.Queue)
			}
		case <-changed:
			idle.Stop()
			if !q.offers.withdraw(l) {
				return pl.answer(ctx, key, l, <-l.terms)
			}
			return false, nil // acknowledged or taken elsewhere meanwhile
		case <-ctx.Done():
			idle.Stop()
			if !q.offers.withdraw(l) {
				return pl.answer(ctx, key, l, <-l.terms)
			}
			lg.unwatch(key, changed)
			return true, ctx.Err()
		}
		idle.Stop()
	}
}

// goBack is how a run of a task of queue that no consumer asked for ends:
// released, as it came, to its queue, or for a lane queue to the delay
// topics for laneReturn: its lane is fetched for its other queues, so
// back in the lane at once it would come back at once (past its queue's
// line of tasks waiting for a consumer, consumer.OnDemandLine).
func goBack(queue string) error {
	if onceq.IsLaneQueue(queue) {
		return consumer.Release(laneReturn, "no HTTP consumer asked for its queue, and its line is full: back in the lane in a while")
	}
	return consumer.Release(0, "no HTTP consumer asked for its queue: back in the queue")
}

// answer writes the take of l, offered by this server's handler or
// granted to this server, on the terms g of the consumer that took it,
// with a place under its queue's limit (handOut), and tells that consumer
// whether it counted. end says the run is over, with err: the lease topic
// could not be written.
func (pl *Pull) answer(ctx context.Context, key string, l *lease, g Terms) (end bool, err error) {
	t := l.task
	if _, err := pl.handOut(ctx, l, key, runRef{t.Partition, t.Offset}, g); err != nil {
		return true, runError(ctx, err)
	}
	return false, nil // held now, or as another event left it, or offered again
}

// runError is the error a run ends with when the lease topic cannot be
// reached: the context's, if it ended (the run is not counted), else err.
func runError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
