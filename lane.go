package onceq

import (
	"errors"
	"strings"
)

// A queue is either a topic of its own, named as the queue ("emails"), or
// a label on a lane: a topic that many queues share. A lane queue's name
// is the lane and the label joined by LaneSep ("fn/resize-image",
// "fn/send-mail"): its tasks are records of the topic "fn" whose
// onceq-queue header holds the whole name. A label costs nothing until a
// task uses it, so a deployment may hold as many as it has names for,
// while each topic costs every client that reads it.
//
// No topic name holds LaneSep, so the two kinds never meet: a name with
// it is a lane queue, one without it has its own topic.
//
// The lane queues of a lane share its partitions, and each has IDs and
// keys of its own: the same ID in two lane queues is two tasks. So a lane
// queue's task without a Key of its own is keyed by its queue and its ID
// ("fn/resize/<ID>", Task.PartitionKey), not by the bare ID, and a worker
// orders a lane queue's records by their keys within their queue
// (LaneKey): no task of one lane queue ever waits behind another's.

// LaneSep separates a lane queue's lane from its label.
const LaneSep = '/'

// MaxLabelLen is the longest label of a lane queue, in bytes.
const MaxLabelLen = 128

// SplitLane returns the lane and the label of a lane queue's name; ok is
// false for a queue of its own topic. It does not validate the parts
// (ValidateLaneQueue does).
func SplitLane(queue string) (lane, label string, ok bool) {
	return strings.Cut(queue, string(LaneSep))
}

// QueueTopic returns the topic that holds a queue's tasks: the lane of a
// lane queue, the queue itself otherwise.
func QueueTopic(queue string) string {
	if lane, _, ok := SplitLane(queue); ok {
		return lane
	}
	return queue
}

// ValidateLaneQueue checks the name of a lane queue, lane/label: the
// lane a name ValidateQueue accepts (it is a topic), the label 1 to
// MaxLabelLen of the bytes a queue name may hold.
func ValidateLaneQueue(name string) error {
	lane, label, ok := SplitLane(name)
	if !ok {
		return invalid(ErrInvalidQueue, "queue", name, "a lane queue's name is <lane>/<label>, such as \"fn/resize-image\"")
	}
	if err := ValidateQueue(lane); err != nil {
		var e *Error
		errors.As(err, &e)
		return invalid(e.Kind, "queue", name, "its lane %q: %s", lane, e.Hint)
	}
	switch {
	case label == "":
		return invalid(ErrInvalidQueue, "queue", name, "the label after '%c' is empty: name the queue, as in %q", LaneSep, lane+string(LaneSep)+"resize-image")
	case len(label) > MaxLabelLen:
		return invalid(ErrInvalidQueue, "queue", name, "its label has %d bytes: at most %d", len(label), MaxLabelLen)
	}
	for i := 0; i < len(label); i++ {
		if !queueByte(label[i]) {
			return invalid(ErrInvalidQueue, "queue", name, "its label may hold letters, digits, '.', '_' or '-', and one '%c' separates it from the lane", LaneSep)
		}
	}
	return nil
}

// LaneKey returns what orders a record of lane queue queue among the
// records of its lane: its key within its queue, the queue, LaneSep and
// the key ("fn/resize/<key>"), or the key itself when it starts with the
// queue and LaneSep already, as the key of a task without one of its own
// does (Task.PartitionKey). So the records of two lane queues never share
// an order, whatever keys their writers chose, and a record keyed by its
// bare ID (another client's, or one written before onceq keyed lane
// queues' tasks by their queue) is ordered with those keyed by its queue
// and that ID.
func LaneKey(queue string, key []byte) string {
	if len(key) > len(queue) && key[len(queue)] == LaneSep && string(key[:len(queue)]) == queue {
		return string(key)
	}
	return queue + string(LaneSep) + string(key)
}

// IsLaneQueue reports whether a queue's name is a lane queue's: it holds
// LaneSep. It does not validate the name (ValidateLaneQueue does).
func IsLaneQueue(name string) bool { return strings.IndexByte(name, LaneSep) >= 0 }

// ValidateAnyQueue checks a queue name of either kind: a lane queue's
// (ValidateLaneQueue) when it holds LaneSep, a topic's (ValidateQueue)
// otherwise.
func ValidateAnyQueue(name string) error {
	if IsLaneQueue(name) {
		return ValidateLaneQueue(name)
	}
	return ValidateQueue(name)
}
