package pull

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Probes. An acknowledgment sent to one server of a task that another
// server's handler runs waits for that handler's commit. When the commit
// is slow to come, the server that took the acknowledgment asks, on the
// lease topic, whether the runner (leaseState.Runner) is alive and still
// runs the task: a live server answers a probe of itself as soon as it
// reads it. A runner that does not answer within ackProbeWait is taken
// for dead (killed, or cut off from Kafka): its runs start again only
// once the pull group's session timeout hands its partitions to another
// server, many seconds on. A runner that answers that it no longer runs
// the task lost it (its partition moved in a rebalance, or its Kafka
// session restarted): it runs again once its partition's owner fetches
// its queue. Either way the acknowledgment, which counted, answers at
// once that the task completes with its result when its run commits
// (ackLater), instead of waiting for that run.

// ackProbeAfter is how long an acknowledgment of a run another server
// holds waits for its commit before it probes that server.
const ackProbeAfter = 250 * time.Millisecond

// ackProbeWait is how long a probe waits for its answer: the runner is
// dead past it.
const ackProbeWait = 500 * time.Millisecond

// probeKey is the key of the probes of server holder and their answers.
func probeKey(holder string) string { return "\x01probe\x00" + holder }

// probe is one of this server's probes: answered is closed when the
// answer came, and held is what it said.
type probe struct {
	answered chan struct{}
	held     bool
}

// probedLocked folds a probe or its answer: a probe of this server is
// answered, and an answer wakes the probe it names.
func (lg *ledger) probedLocked(ev leaseEvent) {
	switch ev.Kind {
	case evProbe:
		if ev.Holder == lg.id || ev.Holder == lg.member && lg.member != "" {
			go lg.pong(ev.Nonce, ev.Key)
		}
	case evPong:
		if p, ok := lg.probes[ev.Lease]; ok {
			p.held = ev.Held
			close(p.answered)
			delete(lg.probes, ev.Lease)
		}
	}
}

// pong answers the probe named probe, of lease key: this server is
// alive, and runs the lease's task or not.
func (lg *ledger) pong(probe, key string) {
	held := lg.holds != nil && lg.holds(key)
	v, err := json.Marshal(leaseEvent{Kind: evPong, Nonce: rand.Text(), Holder: lg.id, Lease: probe, Held: held})
	if err != nil {
		return
	}
	lg.cl.Produce(context.Background(), &kgo.Record{Topic: lg.topic, Key: []byte(probeKey(lg.id)), Value: v}, func(_ *kgo.Record, err error) {
		if err != nil {
			lg.log.Debug("a probe was not answered", "err", err)
		}
	})
}

// ping probes the server whose pull worker is the pull group's member
// instance and reports whether it answered within wait of the probe's
// write: whether it is alive.
func (lg *ledger) ping(ctx context.Context, instance string, wait time.Duration) (bool, error) {
	answered, _, err := lg.ask(ctx, instance, "", wait)
	return answered, err
}

// ask probes holder, a server or the pull group member of one, about the
// task of lease key (none: empty), and reports whether it answered within
// wait of the probe's write, and whether its handler runs the task. The
// probes of holder are forgotten (a tombstone) once it answered or wait
// passed.
func (lg *ledger) ask(ctx context.Context, holder, key string, wait time.Duration) (answered, held bool, err error) {
	nonce := rand.Text()
	p := &probe{answered: make(chan struct{})}
	lg.mu.Lock()
	lg.probes[nonce] = p
	lg.mu.Unlock()
	defer func() {
		lg.mu.Lock()
		delete(lg.probes, nonce)
		lg.mu.Unlock()
	}()
	v, err := json.Marshal(leaseEvent{Kind: evProbe, Nonce: nonce, Holder: holder, Key: key})
	if err != nil {
		return false, false, err
	}
	pk := []byte(probeKey(holder))
	if err := lg.cl.ProduceSync(ctx, &kgo.Record{Topic: lg.topic, Key: pk, Value: v}).FirstErr(); err != nil {
		return false, false, fmt.Errorf("leases: probing server %s: %w", holder, err)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.answered:
		answered = true
		lg.mu.Lock()
		held = p.held
		lg.mu.Unlock()
	case <-t.C:
	case <-ctx.Done():
		return false, false, ctx.Err()
	}
	lg.forget(string(pk))
	return answered, held, nil
}
