package pull

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

// Grants: a queue's partitions belong to one server of the pull group at
// a time, and its consumers may be on another. A server whose consumers
// wait for a queue says so in the lease topic (ledger.announce); a server
// running a task of that queue with none of its own consumers waiting
// grants the task to it (a grant, carrying the task); that server's
// consumer takes it as it takes its own, the take naming it; and a grant
// not taken within grantHold is revoked by the server that made it, which
// offers the task again. The topic's order decides between a take and a
// revoke, as between every other pair of events.

// remoteAfter is how long a task waits for a consumer of the server
// running it before it is granted to another server's.
const remoteAfter = 2 * time.Millisecond

// grantHold is how long a grant waits for a take.
const grantHold = 5 * time.Second

// grant grants t to server holder. end says the run is over, with err.
func (pl *Pull) grant(ctx context.Context, t *consumer.Task, key, holder string) (end bool, err error) {
	rec := t.Record(t.Topic)
	wt := &wireTask{Value: rec.Value}
	for _, h := range rec.Headers {
		wt.Headers = append(wt.Headers, wireHeader{Key: h.Key, Value: h.Value})
	}
	_, _, err = pl.ledger.write(ctx, key, leaseEvent{Kind: evGrant, Holder: holder, Runner: pl.ledger.id, Partition: t.Partition, Offset: t.Offset,
		Until: time.Now().Add(grantHold).UnixMilli(), Task: wt})
	if err != nil {
		return true, runError(ctx, err)
	}
	return false, nil // granted, or as another event left it
}

// awaitGrant waits while the task is granted to another server: for a
// change, or the end of the grant, when it revokes it. end says the run is
// over, with err.
func (pl *Pull) awaitGrant(ctx context.Context, topic, key string, st leaseState, changed <-chan struct{}) (end bool, err error) {
	_, counted, err := pl.endAt(ctx, key, st.GrantUntil, changed, leaseEvent{Kind: evRevoke, Lease: st.GrantNonce})
	if err != nil {
		return true, err
	}
	if counted {
		pl.ledger.unwanted(topic, st.Holder, st.GrantUntil.Add(-grantHold)) // its consumers are gone
	}
	return false, nil
}

// offerGranted offers a task granted to this server to its consumers
// until the grant ends, and writes the take of the one that takes it. It
// is called on the lease topic's reading goroutine, so it starts one of
// its own.
func (pl *Pull) offerGranted(key string, st leaseState) {
	topic, _, _ := cutLeaseKey(key)
	rec := &kgo.Record{Topic: topic, Partition: st.Partition, Offset: st.Offset, Value: st.Task.Value}
	for _, h := range st.Task.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	task, err := onceq.FromRecord(rec)
	if err != nil {
		pl.ledger.log.Warn("a task granted to this server cannot be read: it is left to its grant's end", "key", key, "err", err)
		return
	}
	t := &consumer.Task{Task: task, Topic: topic, Partition: st.Partition, Offset: st.Offset}
	go func() {
		lg := pl.ledger
		q := pl.queue(topic)
		ctx, cancel := context.WithDeadline(context.Background(), st.GrantUntil.Add(-grantHold/10))
		defer cancel()
		_, _, changed := lg.watch(key)
		defer lg.unwatch(key, changed)
		l := newLease(t)
		q.offers.put(l)
		q.offered.Store(time.Now().UnixNano())
		select {
		case g := <-l.terms:
			pl.answer(ctx, key, l, g)
			return
		case <-changed: // revoked, or acknowledged
		case <-ctx.Done(): // its grant ends: revoked by the server that made it
		}
		if !q.offers.withdraw(l) {
			pl.answer(ctx, key, l, <-l.terms) // taken first
		}
	}()
}
