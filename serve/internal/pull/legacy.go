package pull

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
)

// A server with a lane (onceq serve's default) keeps a namespace's queue
// q as lane queue <lane>/<ns>.<q>; a server without one kept it as the
// topic <ns>.<q>. The jobs still waiting in such a topic when a server
// with a lane starts move to the queue's lane queue the first time a
// consumer asks for the queue: the pull worker fetches the topic beside
// the lane while the queue is wanted, and its run of a job there emits
// the job to the lane queue in the transaction that commits the run, so
// each moves once, with its ID, data, attributes, tries left, ttl and
// submission time. A job handed out before the switch stays its
// consumer's: its ACK through the lane queue finds its lease
// (Acknowledge), and if none comes it moves when its ttr passes.

// laneLabelPattern matches the labels of a lane's queues: <ns>.<queue>.
// A label may hold '_', which a topic's name may not (queueOf).
const laneLabelPattern = `[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`

// legacyOf is the topic that holds lane queue topic's jobs from a server
// without a lane, or "" if there is none.
func (pl *Pull) legacyOf(topic string) string {
	if pl.lane == "" {
		return ""
	}
	lane, label, ok := onceq.SplitLane(topic)
	if !ok || lane != pl.lane {
		return ""
	}
	if ts := pl.legacy.Load(); ts == nil || !(*ts)[label] {
		return ""
	}
	return label
}

// legacyEvery is how often a server with a lane lists the topics of
// queues kept by servers without one (watchLegacy): during an upgrade,
// a server of the old layout may make one.
const legacyEvery = time.Minute

// listLegacy keeps the topics of the cluster a server without a lane
// kept a namespace's queue in, <ns>.<queue>.
func (pl *Pull) listLegacy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	names, err := pl.adm.ListTopics(ctx, false)
	if err != nil {
		return fmt.Errorf("listing the topics of queues without a lane: %w", err)
	}
	ts := map[string]bool{}
	for _, n := range names {
		if legacyQueue.MatchString(n) && onceq.ValidateQueue(n) == nil && !broker.IsInternal(n) {
			ts[n] = true
		}
	}
	pl.legacy.Store(&ts)
	return nil
}

// watchLegacy lists them again every legacyEvery until ctx ends.
func (pl *Pull) watchLegacy(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(legacyEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := pl.listLegacy(ctx); err != nil && ctx.Err() == nil {
				log.Warn("listing the topics of queues without a lane failed; retrying", "err", err)
			}
		}
	}
}

// movesToLane says whether queue's jobs move to a lane queue.
func (pl *Pull) movesToLane(queue string) bool {
	_, _, isLane := onceq.SplitLane(queue)
	return pl.lane != "" && !isLane
}

// moveToLane emits t to its lane queue, to commit with t's run.
func (pl *Pull) moveToLane(t *consumer.Task) error {
	out := t.Task.Clone()
	out.Queue = pl.lane + string(onceq.LaneSep) + t.Queue
	out.Due, out.Delay = time.Time{}, 0
	return t.Emit(out)
}

// tell tells w that a consumer waits for topic until until, and for the
// topic that holds its jobs from a server without a lane, if any.
func (pl *Pull) tell(w *consumer.Worker, topic string, until time.Time) {
	w.Want(topic, until)
	if old := pl.legacyOf(topic); old != "" {
		w.Want(old, until)
	}
}
