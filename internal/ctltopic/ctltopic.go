// Package ctltopic is onceq's control topic: cancels of tasks and pauses of
// queues, written by the CLI and package inspect and read by every worker.
//
// The topic, onceq-control, has one partition and is compacted: the last
// record of each key is the state. A cancel is keyed cancel/<queue>/<id>
// and removed (a tombstone) by the worker that ends the task, in the
// transaction of that outcome, whichever it is; a cancel that no worker
// removed holds until its Until (the dedup window of the task it names),
// and no longer, so that it never reaches a submission of that ID past
// the window. A pause is keyed pause/<queue> and stays, so that a paused
// queue stays paused across restarts. A priority note, keyed
// priority/<topic>, says that tasks of a priority above 0 were submitted
// to the topic lately: a worker behind a backlog reads ahead of its fetch
// only in the topics of such notes, or where its fetch met such a task
// (consumer.PriorityLookahead), so that queues without priorities pay
// nothing for it.
package ctltopic

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/table"
)

// Topic is the control topic.
const Topic = broker.ControlTopic

// Key prefixes. A cancel of a lane queue's task has a prefix of its own:
// its key's queue holds one '/', and IDs may hold more, so the kind of
// queue must be known before the key is split.
const (
	cancelPrefix     = "cancel/"
	laneCancelPrefix = "cancel-lane/"
	pausePrefix      = "pause/"
	priorityPrefix   = "priority/"
)

// Priority notes: a submitter of a task of a priority above 0 writes one
// for the task's topic at most every PriorityNoteEvery, and a worker counts
// one for PriorityNoteLife after it was written.
const (
	PriorityNoteEvery = time.Hour
	PriorityNoteLife  = 7 * 24 * time.Hour
)

// CancelKey is the key of a cancel of task id in queue:
// cancel/<queue>/<id>, or cancel-lane/<lane>/<label>/<id> for a lane
// queue's task.
func CancelKey(queue, id string) []byte {
	if onceq.IsLaneQueue(queue) {
		return []byte(laneCancelPrefix + queue + "/" + id)
	}
	return []byte(cancelPrefix + queue + "/" + id)
}

// PauseKey is the key of a queue's pause state.
func PauseKey(queue string) []byte { return []byte(pausePrefix + queue) }

// PriorityKey is the key of a topic's priority note.
func PriorityKey(topic string) []byte { return []byte(priorityPrefix + topic) }

// PriorityNote is the note that tasks of a priority above 0 go to topic,
// written at.
func PriorityNote(topic string, at time.Time) Entry {
	return Entry{Queue: topic, Priority: true, At: at}
}

// value is the JSON of a control record.
type value struct {
	V      int   `json:"v"`
	At     int64 `json:"at"`
	Until  int64 `json:"until,omitempty"`
	Paused *bool `json:"paused,omitempty"`
}

// Entry is one decoded control record.
type Entry struct {
	// Queue, and ID for a cancel ("" for a pause).
	Queue, ID string
	// Paused is a pause record's state.
	Paused bool
	// Priority marks a priority note (PriorityNote): Queue is a topic to
	// which tasks of a priority above 0 were submitted at At.
	Priority bool
	// At is when it was written.
	At time.Time
	// Until is when a cancel lapses: a task that reaches a worker after
	// it runs. Zero holds until the cancel is removed (a workflow's
	// cancel, which its steps to come read).
	Until time.Time
	// Deleted is a tombstone: the cancel took effect, or was withdrawn.
	Deleted bool
}

// Decode reads a control record. Queue names hold no '/', so the first one
// after the prefix ends the queue; the ID is the rest.
func Decode(key, val []byte) (Entry, error) {
	k := string(key)
	var e Entry
	switch {
	case strings.HasPrefix(k, cancelPrefix):
		q, id, ok := strings.Cut(k[len(cancelPrefix):], "/")
		if !ok || onceq.ValidateTaskQueue(q) != nil || onceq.IsLaneQueue(q) || onceq.ValidateID(id) != nil {
			return Entry{}, fmt.Errorf("control: key %q: want cancel/<queue>/<task ID>", k)
		}
		e.Queue, e.ID = q, id
	case strings.HasPrefix(k, laneCancelPrefix):
		lane, rest, _ := strings.Cut(k[len(laneCancelPrefix):], "/")
		label, id, ok := strings.Cut(rest, "/")
		q := lane + string(onceq.LaneSep) + label
		if !ok || onceq.ValidateLaneQueue(q) != nil || onceq.ValidateID(id) != nil {
			return Entry{}, fmt.Errorf("control: key %q: want cancel-lane/<lane>/<label>/<task ID>", k)
		}
		e.Queue, e.ID = q, id
	case strings.HasPrefix(k, pausePrefix):
		q := k[len(pausePrefix):]
		if onceq.ValidateAnyQueue(q) != nil {
			return Entry{}, fmt.Errorf("control: key %q: want pause/<queue>", k)
		}
		e.Queue = q
	case strings.HasPrefix(k, priorityPrefix):
		topic := k[len(priorityPrefix):]
		if onceq.ValidateQueue(topic) != nil {
			return Entry{}, fmt.Errorf("control: key %q: want priority/<topic>", k)
		}
		e.Queue, e.Priority = topic, true
	default:
		return Entry{}, fmt.Errorf("control: key %q: want cancel/<queue>/<task ID>, pause/<queue> or priority/<topic>", k)
	}
	if val == nil {
		e.Deleted = true
		return e, nil
	}
	var v value
	if err := json.Unmarshal(val, &v); err != nil {
		return Entry{}, fmt.Errorf("control: %s: %w", k, err)
	}
	if v.V != 1 || v.At < 0 || v.At > onceq.MaxUnixMilli || v.Until < 0 || v.Until > onceq.MaxUnixMilli {
		return Entry{}, fmt.Errorf("control: %s: version %d, times %d and %d: want version 1 and times in unix ms", k, v.V, v.At, v.Until)
	}
	if v.Until != 0 && e.ID == "" {
		return Entry{}, fmt.Errorf("control: %s: \"until\" belongs to a cancel record", k)
	}
	if (v.Paused != nil) != (e.ID == "" && !e.Priority) {
		return Entry{}, fmt.Errorf("control: %s: \"paused\" belongs to a pause record, and only to one", k)
	}
	e.At = time.UnixMilli(v.At)
	if v.Until != 0 {
		e.Until = time.UnixMilli(v.Until)
	}
	if v.Paused != nil {
		e.Paused = *v.Paused
	}
	return e, nil
}

// Record encodes an entry as a control record.
func (e Entry) Record() *kgo.Record {
	v := value{V: 1, At: e.At.UnixMilli()}
	if !e.Until.IsZero() {
		v.Until = e.Until.UnixMilli()
	}
	key := CancelKey(e.Queue, e.ID)
	switch {
	case e.Priority:
		key, v.Until = PriorityKey(e.Queue), 0
	case e.ID == "":
		key, v.Paused, v.Until = PauseKey(e.Queue), &e.Paused, 0
	}
	if e.Deleted {
		return &kgo.Record{Topic: Topic, Key: key}
	}
	b, _ := json.Marshal(v) // a struct of numbers and a bool
	return &kgo.Record{Topic: Topic, Key: key, Value: b}
}

// Ensure creates the control topic if it does not exist.
func Ensure(ctx context.Context, adm *broker.Admin) error {
	if err := table.Ensure(ctx, adm, Topic); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	return nil
}

// Write writes control entries and returns once the brokers acknowledged
// them (acks=all, idempotent).
func Write(ctx context.Context, conn broker.Conn, entries ...Entry) error {
	for _, e := range entries {
		if e.Priority {
			if err := onceq.ValidateQueue(e.Queue); err != nil {
				return err
			}
			continue
		}
		if e.ID == "" {
			if err := onceq.ValidateAnyQueue(e.Queue); err != nil {
				return err
			}
			continue
		}
		// A task's cancel: a workflow waiting to start is canceled too.
		if err := onceq.ValidateTaskQueue(e.Queue); err != nil {
			return err
		}
		if err := onceq.ValidateID(e.ID); err != nil {
			return err
		}
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	if err := Ensure(ctx, adm); err != nil {
		return err
	}
	cl, err := conn.NewClient(kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(entries))
	for i, e := range entries {
		recs[i] = e.Record()
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("control: writing to %s: %w", Topic, err)
	}
	return nil
}
