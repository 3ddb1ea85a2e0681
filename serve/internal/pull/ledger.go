package pull

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/table"
)

// leaseTopic is the lease topic of a pull group (lease.go): one
// partition, compacted (a task's acknowledgment that committed is a
// tombstone) and kept for twice the longest a task is held.
func leaseTopic(group string) string { return broker.LeasesTopic(group) }

// leaseKeep is how long a lease no event touches is remembered: past the
// longest time-to-run, an expired lease whose task never ran again and an
// acknowledgment whose commit was never seen are forgotten.
const leaseKeep = HoldMax

// ledger reads a pull group's lease topic into the states of its tasks
// and writes to it. It is safe for concurrent use.
type ledger struct {
	topic string
	log   *slog.Logger
	cl    *kgo.Client // writes (acks=all)
	adm   *kadm.Client
	f     *table.Follower

	// id names this server in grants and wants; onWant and onGrant are
	// called, on the reading goroutine, with another server's want of a
	// queue and with a grant to this server; holds says whether a
	// handler of this server runs the task of a lease key (a probe's
	// answer says it).
	id string
	// member is the pull group's instance ID of this server's pull
	// worker, once known (answerFor): probes of it are answered too, and
	// onRejoin is called for a fresh rejoin event.
	member   string
	onRejoin func()
	onWant   func(topic string, until time.Time)
	onGrant  func(key string, st leaseState)
	holds    func(key string) bool

	progress table.Progress
	mu       sync.Mutex
	states   map[string]*leaseState   // by leaseKey
	watchers map[string]chan struct{} // closed when the key's state changes
	// followers are closed too, each its follower's own (follow).
	followers map[string]map[chan struct{}]bool
	// wants are the other servers' wants, by queue and server; wanted is
	// closed when a queue gets a want.
	wants     map[string]map[string]want
	wanted    map[string]chan struct{}
	announced map[string]time.Time // this server's last want of a queue, and its end
	// probes are this server's probes of others (probe.go), by nonce.
	probes map[string]*probe
	swept  time.Time
}

// openLedger creates the group's lease topic if needed and reads it to its
// end. onWant, onGrant and holds are as the ledger's fields say.
func openLedger(ctx context.Context, conn broker.Conn, group string, log *slog.Logger,
	onWant func(string, time.Time), onGrant func(string, leaseState), holds func(string) bool) (*ledger, error) {
	cl, err := conn.NewClient(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.WithLogger(broker.KgoLogger(log)))
	if err != nil {
		return nil, err
	}
	lg := &ledger{topic: leaseTopic(group), log: log, cl: cl, adm: kadm.NewClient(cl), id: rand.Text()[:12], onWant: onWant, onGrant: onGrant, holds: holds,
		states: map[string]*leaseState{}, watchers: map[string]chan struct{}{}, followers: map[string]map[chan struct{}]bool{},
		wants: map[string]map[string]want{}, wanted: map[string]chan struct{}{}, announced: map[string]time.Time{},
		probes: map[string]*probe{}}
	lg.f, err = table.Follow(ctx, conn, lg.topic, log, lg.apply, table.Configs(broker.LeasesSpec(group, leaseKeep).Configs))
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("leases: %w", err)
	}
	return lg, nil
}

func (lg *ledger) close() {
	lg.f.Close()
	lg.cl.Close()
}

// apply folds one record of the topic.
func (lg *ledger) apply(rec *kgo.Record) {
	defer lg.progress.Applied(rec)
	key := string(rec.Key)
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if rec.Value == nil {
		delete(lg.states, key)
		lg.changedLocked(key)
		return
	}
	ev, err := decodeLeaseEvent(rec.Value)
	if err != nil {
		lg.log.Warn("lease record skipped", "topic", lg.topic, "offset", rec.Offset, "err", err)
		return
	}
	lg.sweepLocked(rec.Timestamp)
	if ev.Kind == evProbe || ev.Kind == evPong {
		lg.probedLocked(ev)
		return
	}
	if ev.Kind == evRejoin {
		lg.rejoinedLocked(rec.Timestamp)
		return
	}
	if ev.Kind == evWant {
		lg.wantLocked(ev, rec.Timestamp)
		return
	}
	st := lg.states[key]
	if st == nil {
		st = &leaseState{}
	}
	if !st.apply(ev, rec.Timestamp) {
		return
	}
	lg.states[key] = st
	lg.changedLocked(key)
	if ev.Kind == evGrant && ev.Holder == lg.id && lg.onGrant != nil {
		lg.onGrant(key, *st)
	}
}

// want is another server's want of a queue: its consumers wait until
// until; at is when it was written.
type want struct{ until, at time.Time }

// wantLocked records another server's want of a queue, written at at.
func (lg *ledger) wantLocked(ev leaseEvent, at time.Time) {
	if ev.Holder == lg.id {
		return
	}
	topic, until := ev.Queue, time.UnixMilli(ev.Until)
	if ev.Fetch {
		if lg.onWant != nil && time.Until(until) > 0 {
			lg.onWant(topic, until)
		}
		return
	}
	m := lg.wants[topic]
	if m == nil {
		m = map[string]want{}
		lg.wants[topic] = m
	}
	m[ev.Holder] = want{until: until, at: at}
	if ch, ok := lg.wanted[topic]; ok {
		close(ch)
		delete(lg.wanted, topic)
	}
	if lg.onWant != nil && time.Until(until) > 0 {
		lg.onWant(topic, until)
	}
}

// wantedElsewhere returns another server whose consumers wait for topic
// now, the one whose want lasts the longest, and a channel closed when a
// want of topic arrives.
func (lg *ledger) wantedElsewhere(topic string) (holder string, ok bool, more <-chan struct{}) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	now := time.Now()
	var best time.Time
	for h, w := range lg.wants[topic] {
		if w.until.After(now) && w.until.After(best) {
			holder, best, ok = h, w.until, true
		}
	}
	ch, had := lg.wanted[topic]
	if !had {
		ch = make(chan struct{})
		lg.wanted[topic] = ch
	}
	return holder, ok, ch
}

// unwanted forgets holder's want of topic if it was written before
// granted: a grant made then found no consumer. A want written since is
// a consumer that came later, and stays.
func (lg *ledger) unwanted(topic, holder string, granted time.Time) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if w, ok := lg.wants[topic][holder]; ok && w.at.Before(granted) {
		delete(lg.wants[topic], holder)
	}
}

// announce writes, without waiting, that this server's consumers wait for
// topic until until, or with fetch that an acknowledgment waits for a run
// of its tasks: at most one want a second of each kind for each queue.
func (lg *ledger) announce(topic string, until time.Time, fetch bool) {
	seen := topic
	if fetch {
		seen = "\x00" + topic
	}
	lg.mu.Lock()
	last, ok := lg.announced[seen]
	if ok && until.Before(last.Add(time.Second)) {
		lg.mu.Unlock()
		return
	}
	lg.announced[seen] = until
	lg.mu.Unlock()
	v, err := json.Marshal(leaseEvent{Kind: evWant, Nonce: rand.Text(), Queue: topic, Holder: lg.id, Until: until.UnixMilli(), Fetch: fetch})
	if err != nil {
		return
	}
	lg.cl.Produce(context.Background(), &kgo.Record{Topic: lg.topic, Key: []byte(wantKey(topic, lg.id)), Value: v}, func(_ *kgo.Record, err error) {
		if err != nil {
			lg.log.Debug("a want was not written", "queue", topic, "err", err)
		}
	})
}

// wantKey is the key of a server's wants of a queue: compaction keeps the
// last.
// ackedTopics returns the queues of the tasks acknowledged since then
// (by the lease topic's clock), each once.
func (lg *ledger) ackedTopics(since time.Time) []string {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	seen := map[string]bool{}
	var topics []string
	for k, st := range lg.states {
		if !st.Acked || st.touched.Before(since) {
			continue
		}
		if topic, _, ok := cutLeaseKey(k); ok && !seen[topic] {
			seen[topic] = true
			topics = append(topics, topic)
		}
	}
	return topics
}

func wantKey(topic, holder string) string { return "\x01want\x00" + topic + "\x00" + holder }

func (lg *ledger) changedLocked(key string) {
	if ch, ok := lg.watchers[key]; ok {
		close(ch)
		delete(lg.watchers, key)
	}
	for ch := range lg.followers[key] {
		close(ch)
	}
	delete(lg.followers, key)
}

// sweepLocked forgets, at most once a minute, the states no event touched
// for leaseKeep, by the topic's clock.
func (lg *ledger) sweepLocked(now time.Time) {
	if now.Sub(lg.swept) < time.Minute {
		return
	}
	lg.swept = now
	for k, st := range lg.states {
		if now.Sub(st.touched) > leaseKeep && !st.Taken {
			delete(lg.states, k)
		}
	}
	for topic, m := range lg.wants {
		for h, w := range m {
			if now.After(w.until) {
				delete(m, h)
			}
		}
		if len(m) == 0 {
			delete(lg.wants, topic)
		}
	}
	for topic, until := range lg.announced {
		if now.After(until) {
			delete(lg.announced, topic)
		}
	}
}

// watch returns key's state (ok: the topic has one) and a channel closed
// when it changes.
func (lg *ledger) watch(key string) (st leaseState, ok bool, changed <-chan struct{}) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	ch, had := lg.watchers[key]
	if !had {
		ch = make(chan struct{})
		lg.watchers[key] = ch
	}
	if p := lg.states[key]; p != nil {
		st, ok = *p, true
	}
	return st, ok, ch
}

// unwatch drops key's watch channel if nothing changed it: a watcher that
// stops watching must call it.
func (lg *ledger) unwatch(key string, changed <-chan struct{}) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if ch, ok := lg.watchers[key]; ok && (<-chan struct{})(ch) == changed {
		delete(lg.watchers, key)
	}
}

// follow returns key's state (ok: the topic has one) and a channel of the
// caller's own, closed when the state changes; stop forgets the channel
// if it was not closed. Unlike watch's, it is no one else's: a follower
// that stops never keeps a watcher from a change.
func (lg *ledger) follow(key string) (st leaseState, ok bool, changed <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	lg.mu.Lock()
	defer lg.mu.Unlock()
	m := lg.followers[key]
	if m == nil {
		m = map[chan struct{}]bool{}
		lg.followers[key] = m
	}
	m[ch] = true
	if p := lg.states[key]; p != nil {
		st, ok = *p, true
	}
	return st, ok, ch, func() {
		lg.mu.Lock()
		defer lg.mu.Unlock()
		if m := lg.followers[key]; m[ch] {
			delete(m, ch)
			if len(m) == 0 {
				delete(lg.followers, key)
			}
		}
	}
}

// state returns key's state as the topic says now.
func (lg *ledger) state(key string) (leaseState, bool) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if p := lg.states[key]; p != nil {
		return *p, true
	}
	return leaseState{}, false
}

// barrier returns once every event written to the topic before the call
// was applied: what a writer learned was written, this server knows.
func (lg *ledger) barrier(ctx context.Context) error {
	ends, err := lg.adm.ListEndOffsets(ctx, lg.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("leases: the end of %s: %w", lg.topic, err)
	}
	o, ok := ends.Lookup(lg.topic, 0)
	if !ok || o.Offset == 0 {
		return nil
	}
	return lg.progress.Wait(ctx, o.Offset-1)
}

// write appends ev for key, waits until it was applied, and reports
// whether it counted and the state it left.
func (lg *ledger) write(ctx context.Context, key string, ev leaseEvent) (bool, leaseState, error) {
	ev.Nonce = rand.Text()
	v, err := json.Marshal(ev)
	if err != nil {
		return false, leaseState{}, err
	}
	if err := lg.progress.Write(ctx, lg.cl, &kgo.Record{Topic: lg.topic, Key: []byte(key), Value: v}); err != nil {
		return false, leaseState{}, fmt.Errorf("leases: %w", err)
	}
	st, _ := lg.state(key)
	return st.counted(ev.Kind, ev.Nonce), st, nil
}

// forget writes key's tombstone without waiting: its acknowledgment
// committed. A tombstone lost leaves the state for leaseKeep.
func (lg *ledger) forget(key string) {
	lg.cl.Produce(context.Background(), &kgo.Record{Topic: lg.topic, Key: []byte(key)}, func(_ *kgo.Record, err error) {
		if err != nil {
			lg.log.Debug("a lease's tombstone was not written", "err", err)
		}
	})
}
