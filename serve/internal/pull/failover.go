package pull

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/consumer"
)

// Failover. A server SIGKILLed, or cut off from Kafka, keeps its pull
// worker's partitions until the pull group's session timeout (10 s), and
// its open transaction keeps them unreadable until the transaction
// timeout: their jobs wait that long, and so do the commits of the
// acknowledgments of the jobs it ran. A server whose consumers wait, or
// whose acknowledgment found a job's runner silent, pings the group's
// other members instead (ping, on the lease topic, at most every
// failoverEvery): each live server answers for its pull worker's
// instance ID. One that does not answer within ackProbeWait is taken for
// dead and removed from the group (broker.Admin.RemoveMember: its
// producer fenced, its open transaction aborted), and a rejoin event has
// every server's pull worker join the group again at once, so that its
// partitions move within about a second. A server removed while alive
// (a stall of more than ackProbeWait) loses its partitions and its open
// transaction, and rejoins: its runs start again on the partitions' new
// owners, whose hand-outs keep the leases it wrote.

// failoverEvery bounds how often a server looks for dead members.
const failoverEvery = time.Second

// failoverLook bounds one look: the group's description, the pings, and
// the removals.
const failoverLook = 10 * time.Second

// removedAgainAfter is how long a server does not remove a member it
// removed again: one that answers no probe but is alive (a server whose
// reading of the lease topic stalls) loses its partitions at most that
// often. A rejoin event older than it is history (a replay of the topic).
const removedAgainAfter = consumer.DefaultSessionTimeout

// failover is a server's looks for dead members of the pull group.
type failover struct {
	mu      sync.Mutex
	looking bool
	last    time.Time            // when the last look began
	removed map[string]time.Time // by instance ID: when this server removed it
}

// rejoinKey is the key of the rejoin events of the removal of member
// instance: compaction keeps the last.
func rejoinKey(instance string) string { return "\x01rejoin\x00" + instance }

// answerFor has the ledger answer the probes of the pull group's member
// instance, this server's pull worker, and call rejoin for each fresh
// rejoin event.
func (lg *ledger) answerFor(instance string, rejoin func()) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	lg.member, lg.onRejoin = instance, rejoin
}

// rejoinedLocked folds a rejoin event written at at.
func (lg *ledger) rejoinedLocked(at time.Time) {
	if lg.onRejoin != nil && time.Since(at) < removedAgainAfter {
		go lg.onRejoin()
	}
}

// rejoinAll writes that member instance was removed from the pull group.
func (lg *ledger) rejoinAll(ctx context.Context, instance string) error {
	v, err := json.Marshal(leaseEvent{Kind: evRejoin, Nonce: rand.Text(), Holder: instance})
	if err != nil {
		return err
	}
	return lg.cl.ProduceSync(ctx, &kgo.Record{Topic: lg.topic, Key: []byte(rejoinKey(instance)), Value: v}).FirstErr()
}

// suspect looks for dead members of the pull group, in the background,
// unless a look runs or began within failoverEvery.
func (pl *Pull) suspect() {
	f := &pl.failover
	f.mu.Lock()
	if f.looking || time.Since(f.last) < failoverEvery || pl.instance == "" {
		f.mu.Unlock()
		return
	}
	f.looking, f.last = true, time.Now()
	f.mu.Unlock()
	go func() {
		defer func() {
			f.mu.Lock()
			f.looking = false
			f.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), failoverLook)
		defer cancel()
		go func() {
			select {
			case <-pl.quit:
				cancel()
			case <-ctx.Done():
			}
		}()
		pl.removeDead(ctx)
	}()
}

// removeDead pings every other member of the pull group and removes
// those that do not answer within ackProbeWait.
func (pl *Pull) removeDead(ctx context.Context) {
	members, err := pl.adm.StaticMembers(ctx, pl.group)
	if err != nil {
		pl.log.Debug("looking for dead servers: the pull group's members are unknown", "err", err)
		return
	}
	var (
		mu   sync.Mutex
		dead []string
		wg   sync.WaitGroup
	)
	for _, m := range members {
		if m == pl.instance {
			continue
		}
		wg.Go(func() {
			// A ping not written (this server cut off from Kafka) says
			// nothing of the other.
			if alive, err := pl.ledger.ping(ctx, m, ackProbeWait); err == nil && !alive {
				mu.Lock()
				dead = append(dead, m)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(dead)
	for _, m := range dead {
		f := &pl.failover
		f.mu.Lock()
		if time.Since(f.removed[m]) < removedAgainAfter {
			f.mu.Unlock()
			continue
		}
		if f.removed == nil {
			f.removed = map[string]time.Time{}
		}
		f.removed[m] = time.Now()
		f.mu.Unlock()
		if err := pl.adm.RemoveMember(ctx, pl.group, m, consumer.DefaultTransactionTimeout); err != nil {
			pl.log.Warn("a server of the pull group answers no probe, and could not be removed: its jobs wait for its session to time out", "member", m, "err", err)
			continue
		}
		pl.removals.Inc()
		pl.log.Warn("a server of the pull group answered no probe: removed, its jobs move to the others", "member", m, "probe_wait", ackProbeWait)
		if err := pl.ledger.rejoinAll(ctx, m); err != nil {
			pl.log.Debug("the rejoin event was not written: the other servers rejoin at their next heartbeat", "err", err)
		}
	}
}
