package onceq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// TaskState is where a task stands, as its task record tells.
type TaskState string

// The states of a task. A task without a record is pending: submitted
// and not yet run, or unknown.
const (
	StatePending   TaskState = "pending"
	StateScheduled TaskState = "scheduled" // waiting in the delay buckets until Due
	StateRunning   TaskState = "running"   // a worker runs it since Started (runs past a second are recorded)
	StateRetrying  TaskState = "retrying"  // failed; its next attempt is due at Due
	StateSucceeded TaskState = "succeeded" // final, with its Result
	StateDead      TaskState = "dead"      // final: dead-lettered, with Reason and Error
	StateExpired   TaskState = "expired"   // final: past its expiry before it ran
	StateCanceled  TaskState = "canceled"  // final: canceled before it started
)

// TaskStates lists every state, in the order of a task's life.
var TaskStates = []TaskState{StatePending, StateScheduled, StateRunning, StateRetrying, StateSucceeded, StateDead, StateExpired, StateCanceled}

// Final reports whether a task in state s is done: it never runs again.
func (s TaskState) Final() bool {
	switch s {
	case StateSucceeded, StateDead, StateExpired, StateCanceled:
		return true
	}
	return false
}

// ParseTaskState reads a state name.
func ParseTaskState(s string) (TaskState, error) {
	for _, st := range TaskStates {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("onceq: task state %q: want one of pending, scheduled, running, retrying, succeeded, dead, expired, canceled", s)
}

// TaskRecord is one transition of a task, as workers write it to its
// queue's task records topic (broker.RecordsTopic) in the transaction of
// the outcome it describes. The last record of an ID is the task's state.
//
// A Kafka record of that topic holds one or more task records, one JSON
// object a line (JSON Lines): a worker writes one Kafka record per queue
// partition per commit with that commit's transitions, keyed by the queue
// partition ("<queue>/<partition>") so that the transitions of a task stay
// in order; a producer writes its tasks' pending records in batches (see
// Task.PendingRecord), and a worker the records of tasks its runs emit,
// keyed by the task ID. Any
// Kafka client can read them; DecodeTaskRecords splits the lines. A task
// record is:
//
//	{"v":1,"id":"order-7","queue":"emails","state":"succeeded","attempt":1,
//	 "priority":5,"enqueued":1700000000000,"started":1700000000100,
//	 "finished":1700000000120,"worker":"worker-1/3f2a","partition":3,
//	 "offset":1042,"result":"b2s="}
//
// Times are unix milliseconds; result is base64; empty fields are left
// out, so a record of priority 0 has none, as records written before
// priorities existed.
type TaskRecord struct {
	ID    string
	Queue string
	State TaskState
	// Attempt is the run the record describes (1 for the first); for
	// retrying, the attempt that failed. MaxAttempts is the task's limit,
	// 0 for the worker's default.
	Attempt     int
	MaxAttempts int
	// Priority is the task's priority (Task.Priority), 0 to MaxPriority.
	Priority int
	// Enqueued is when the task was first submitted; Started and Finished
	// bound the run; Due is when a scheduled or retrying task runs next.
	Enqueued, Started, Finished, Due time.Time
	// Worker is the instance that wrote the record.
	Worker string
	// Reason is why a task is dead, expired or canceled (the dead letter's
	// reason); Error is the last error of its handler.
	Reason, Error string
	// Result is what the handler returned (Task.SetResult).
	Result []byte
	// Partition and Offset locate the queue record of the run.
	Partition int32
	Offset    int64
}

// taskRecordVersion is the version of the JSON value.
const taskRecordVersion = 1

// MaxTaskRecordBytes bounds a task record's value when it is decoded:
// results are bounded well below it (consumer.DefaultMaxResultBytes).
const MaxTaskRecordBytes = 4 << 20

// AppendJSON appends the record's value to b. It is written by hand, and
// without closures: every task's commit writes one.
func (r *TaskRecord) AppendJSON(b []byte) []byte {
	b = slices.Grow(b, r.JSONSize())
	b = append(b, `{"v":1,"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"queue":`...)
	b = appendJSONString(b, r.Queue)
	b = append(b, `,"state":"`...)
	b = append(b, r.State...)
	b = append(b, '"')
	if r.Attempt != 0 {
		b = appendField(b, "attempt", int64(r.Attempt))
	}
	if r.MaxAttempts != 0 {
		b = appendField(b, "max_attempts", int64(r.MaxAttempts))
	}
	if r.Priority != 0 {
		b = appendField(b, "priority", int64(r.Priority))
	}
	b = appendTime(b, "enqueued", r.Enqueued)
	b = appendTime(b, "started", r.Started)
	b = appendTime(b, "finished", r.Finished)
	b = appendTime(b, "due", r.Due)
	b = appendStringField(b, "worker", r.Worker)
	b = appendStringField(b, "reason", r.Reason)
	b = appendStringField(b, "error", r.Error)
	b = appendField(b, "partition", int64(r.Partition))
	b = appendField(b, "offset", r.Offset)
	if r.Result != nil {
		b = append(b, `,"result":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.Result)
		b = append(b, '"')
	}
	return append(b, '}')
}

// JSONSize is a close upper bound of the size of AppendJSON's output when
// no string needs escaping: the fixed fields take at most 215 bytes.
func (r *TaskRecord) JSONSize() int {
	return 215 + len(r.ID) + len(r.Queue) + len(r.Worker) + len(r.Reason) + len(r.Error) + base64.StdEncoding.EncodedLen(len(r.Result))
}

func appendField(b []byte, name string, n int64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, n, 10)
}

func appendTime(b []byte, name string, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	return appendField(b, name, t.UnixMilli())
}

func appendStringField(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, s)
}

// DecodeTaskRecords reads a Kafka record's value of task records, one JSON
// object a line (empty lines are skipped). It stops at the first line it
// refuses, naming it.
func DecodeTaskRecords(value []byte) ([]TaskRecord, error) {
	var out []TaskRecord
	for n := 1; len(value) > 0; n++ {
		line := value
		if i := bytes.IndexByte(value, '\n'); i >= 0 {
			line, value = value[:i], value[i+1:]
		} else {
			value = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		r, err := DecodeTaskRecord(line)
		if err != nil {
			return out, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// taskRecordJSON is the decoded form of the value.
type taskRecordJSON struct {
	V           int     `json:"v"`
	ID          string  `json:"id"`
	Queue       string  `json:"queue"`
	State       string  `json:"state"`
	Attempt     int     `json:"attempt"`
	MaxAttempts int     `json:"max_attempts"`
	Priority    int     `json:"priority"`
	Enqueued    int64   `json:"enqueued"`
	Started     int64   `json:"started"`
	Finished    int64   `json:"finished"`
	Due         int64   `json:"due"`
	Worker      string  `json:"worker"`
	Reason      string  `json:"reason"`
	Error       string  `json:"error"`
	Partition   int32   `json:"partition"`
	Offset      int64   `json:"offset"`
	Result      *string `json:"result"`
}

// DecodeTaskRecord reads a task record's value (TaskRecord.AppendJSON).
// It refuses values of another version, unknown states and out-of-range
// numbers, so that a reader never shows what a writer did not mean.
func DecodeTaskRecord(value []byte) (TaskRecord, error) {
	if len(value) > MaxTaskRecordBytes {
		return TaskRecord{}, fmt.Errorf("onceq: task record of %d bytes, over the limit of %d", len(value), MaxTaskRecordBytes)
	}
	j, ok := decodeCanonical(value)
	if !ok {
		// Any JSON a writer other than AppendJSON made, or one whose
		// strings have escapes.
		j = taskRecordJSON{}
		if err := json.Unmarshal(value, &j); err != nil {
			return TaskRecord{}, fmt.Errorf("onceq: task record: %w", err)
		}
	}
	if j.V != taskRecordVersion {
		return TaskRecord{}, fmt.Errorf("onceq: task record version %d: this onceq reads version %d: upgrade it", j.V, taskRecordVersion)
	}
	st, err := ParseTaskState(j.State)
	if err != nil {
		return TaskRecord{}, err
	}
	if ValidateID(j.ID) != nil {
		return TaskRecord{}, fmt.Errorf("onceq: task record: invalid task ID %q", quoteCut(j.ID))
	}
	if ValidateTopic(j.Queue) != nil && ValidateLaneQueue(j.Queue) != nil {
		return TaskRecord{}, fmt.Errorf("onceq: task record: invalid queue %q", quoteCut(j.Queue))
	}
	if j.Attempt < 0 || j.Attempt > MaxAttemptCount || j.MaxAttempts < 0 || j.MaxAttempts > MaxAttemptCount || j.Partition < 0 || j.Offset < 0 {
		return TaskRecord{}, fmt.Errorf("onceq: task record of %q: attempt, max_attempts, partition and offset are whole numbers from 0", j.ID)
	}
	if j.Priority < 0 || j.Priority > MaxPriority {
		return TaskRecord{}, fmt.Errorf("onceq: task record of %q: priority %d: want %s", j.ID, j.Priority, PriorityRange)
	}
	r := TaskRecord{ID: j.ID, Queue: j.Queue, State: st, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Priority: j.Priority,
		Worker: j.Worker, Reason: j.Reason, Error: j.Error, Partition: j.Partition, Offset: j.Offset}
	for _, f := range []struct {
		name string
		ms   int64
		to   *time.Time
	}{{"enqueued", j.Enqueued, &r.Enqueued}, {"started", j.Started, &r.Started}, {"finished", j.Finished, &r.Finished}, {"due", j.Due, &r.Due}} {
		if f.ms < 0 || f.ms > MaxUnixMilli {
			return TaskRecord{}, fmt.Errorf("onceq: task record of %q: %s %d is not a time in unix milliseconds", j.ID, f.name, f.ms)
		}
		if f.ms > 0 {
			*f.to = time.UnixMilli(f.ms)
		}
	}
	if j.Result != nil {
		if r.Result, err = base64.StdEncoding.DecodeString(*j.Result); err != nil {
			return TaskRecord{}, fmt.Errorf("onceq: task record of %q: result is not base64: %w", j.ID, err)
		}
	}
	return r, nil
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= ' ' && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// PendingRecord is the record of a resolved task as it is submitted:
// pending, or scheduled with its due time when delayed (it goes to the
// delay buckets), in partition, the one of its queue it runs in (its
// PartitionKey's). It names no Worker, so that readers never let it
// replace a worker's record of the ID; its Offset is 0, since no run of
// it has a queue record yet. Producers write it from a task's submission
// (producer.Records), and workers for the tasks a run emits.
func (t *Task) PendingRecord(delayed bool, partition int32) TaskRecord {
	tr := TaskRecord{ID: t.ID, Queue: t.Queue, State: StatePending, MaxAttempts: t.MaxAttempts, Priority: t.Priority,
		Enqueued: t.Enqueued, Partition: partition}
	if delayed {
		tr.State, tr.Due = StateScheduled, t.Due
	}
	return tr
}
