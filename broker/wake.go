package broker

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Wake-ups let a worker over thousands of queues fetch only the queues
// that have tasks. A fetch names every partition it follows, and both
// the brokers and the client pay for each one on every fetch: measured on
// the embedded broker, a consumer following 10,000 one-partition topics
// delivered 200 records/s at p99 517 ms using two thirds of a core, where
// one topic takes a few milliseconds. So a worker stops fetching a queue
// partition that has been quiet for a while, and whoever writes a task
// to a queue also writes the queue's name to WakeTopic, at most once per
// WakeEvery per queue: every worker reads it and fetches the queue's
// partitions again. Tasks written by other clients, without a wake-up,
// are found by the worker's periodic look at the quiet partitions' last
// offsets instead, within a second or so.

// WakeTopic is the topic of wake-ups: records keyed by a queue's name,
// with no value. One partition, kept an hour.
const WakeTopic = "onceq-wake"

// WakeEvery is how often a writer wakes the workers for one queue at most.
// A worker keeps a partition fetched for longer than this after its last
// record or wake-up (see consumer.DefaultQuietAfter), so a task written
// between two wake-ups of its queue always finds the partition fetched.
const WakeEvery = 250 * time.Millisecond

// workflowQueue is onceq.WorkflowQueue, the one queue with onceq's
// reserved prefix (this package is below the root package).
const workflowQueue = "onceq-workflow"

// AppendWakeUps appends to recs a wake-up for each queue recs write a
// task to, once per queue: written in the same transaction as the tasks,
// the wake-ups become visible with them.
func AppendWakeUps(recs []*kgo.Record) []*kgo.Record {
	var woken map[string]bool
	for _, r := range recs[:len(recs):len(recs)] {
		if IsInternal(r.Topic) && r.Topic != workflowQueue || woken[r.Topic] {
			continue
		}
		if woken == nil {
			woken = map[string]bool{}
		}
		woken[r.Topic] = true
		recs = append(recs, &kgo.Record{Topic: WakeTopic, Key: []byte(r.Topic)})
	}
	return recs
}
