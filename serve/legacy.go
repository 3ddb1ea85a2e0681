package serve

import (
	"time"

	"github.com/onceq/onceq"
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
// (acknowledge), and if none comes it moves when its ttr passes.

// laneLabelPattern matches the labels of a lane's queues: <ns>.<queue>.
// A label may hold '_', which a topic's name may not (topicOf).
const laneLabelPattern = `[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`

// legacyOf is the topic that held lane queue topic's jobs on a server
// without a lane, or "" if none could have.
func (pl *pull) legacyOf(topic string) string {
	if pl.lane == "" {
		return ""
	}
	lane, label, ok := onceq.SplitLane(topic)
	if !ok || lane != pl.lane || onceq.ValidateQueue(label) != nil || !legacyQueue.MatchString(label) {
		return ""
	}
	return label
}

// movesToLane says whether queue's jobs move to a lane queue.
func (pl *pull) movesToLane(queue string) bool {
	_, _, isLane := onceq.SplitLane(queue)
	return pl.lane != "" && !isLane
}

// moveToLane emits t to its lane queue, to commit with t's run.
func (pl *pull) moveToLane(t *consumer.Task) error {
	out := t.Task.Clone()
	out.Queue = pl.lane + string(onceq.LaneSep) + t.Queue
	out.Due, out.Delay = time.Time{}, 0
	return t.Emit(out)
}

// tell tells w that a consumer waits for topic until until, and for the
// topic that held its jobs on a server without a lane, if this server
// fetches some of its partitions.
func (pl *pull) tell(w *consumer.Worker, topic string, until time.Time) {
	w.Want(topic, until)
	if old := pl.legacyOf(topic); old != "" && w.Owns(old) {
		w.Want(old, until)
	}
}
