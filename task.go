package onceq

import (
	"strconv"
	"strings"
	"time"
)

// Header names of the wire format. Values are ASCII; times are unix
// milliseconds and durations are milliseconds.
const (
	HeaderID          = "onceq-id"
	HeaderQueue       = "onceq-queue"
	HeaderDue         = "onceq-due"
	HeaderExpires     = "onceq-expires"
	HeaderAttempt     = "onceq-attempt"
	HeaderMaxAttempts = "onceq-max-attempts"
	HeaderTimeout     = "onceq-timeout"
	HeaderEnqueued    = "onceq-enqueued"
	HeaderError       = "onceq-error"
	HeaderFailed      = "onceq-failed"
	HeaderBackoff     = "onceq-backoff"
	HeaderRequeued    = "onceq-requeued"
	HeaderGeneratedID = "onceq-id-generated"
	HeaderWorkflow    = "onceq-workflow"
	HeaderInput       = "onceq-input"
	HeaderCancel      = "onceq-cancel"
	HeaderPriority    = "onceq-priority"
)

// WorkflowQueue is the queue of the workflow service (package workflow):
// workflows to start, and the reports of group members to their join. It
// is the one queue with onceq's reserved prefix that tasks may name.
const WorkflowQueue = "onceq-workflow"

// HeaderPrefix marks the headers that belong to onceq's wire format. A
// header with this prefix that onceq does not know is malformed, on
// submission (Validate) and when a worker reads it (FromRecord), so that a
// typo (onceq-delay for onceq-due) is never silently ignored.
const HeaderPrefix = "onceq-"

// Limits of the wire format.
const (
	// MaxIDLen is the longest task ID, in bytes.
	MaxIDLen = 256
	// MaxTopicLen is the longest topic name Kafka accepts.
	MaxTopicLen = 249
	// MaxQueueLen is the longest queue name: its dead-letter topic,
	// onceq-dlq-<queue>, and its task records topic, onceq-rec-<queue>,
	// must fit MaxTopicLen. (A worker's group and queue
	// together must also fit their changelog topic: see
	// broker.ValidateChangelog.)
	MaxQueueLen = MaxTopicLen - len("onceq-dlq-")
	// DefaultMaxMessageBytes is the default largest record the broker
	// accepts (Kafka's message.max.bytes, 1 MiB).
	DefaultMaxMessageBytes = 1 << 20
	// MaxErrorLen bounds the onceq-error header: longer texts are cut.
	MaxErrorLen = 1024
	// MaxAttemptCount is the largest attempt number and max attempts the
	// wire format carries (2^31-1): a Kafka client in any language reads
	// it as a 32-bit integer.
	MaxAttemptCount = 1<<31 - 1
	// MaxUnixMilli is the latest time the wire format carries, the end of
	// the year 9999 in unix milliseconds. The earliest is the unix epoch
	// (0): times are unsigned.
	MaxUnixMilli int64 = 253402300799999
	// MaxPriority is the highest priority a task may have; 0, the
	// default, is the lowest.
	MaxPriority = 9
	// PriorityRange is the range of priorities, as every error that
	// refuses one says it.
	PriorityRange = "0 (the default, the lowest) to 9 (the highest)"
)

// Header is a record header that onceq passes through untouched.
type Header struct {
	Key   string
	Value []byte
}

// Task is one unit of work: a Kafka record plus the onceq headers.
//
// The zero value of every optional field means "not set": no delay, no
// expiry, the worker's default attempts and timeout.
type Task struct {
	// ID identifies the task: duplicates of one ID execute once. 1 to 256
	// printable ASCII bytes. Empty on submission: the producer assigns a
	// time-ordered unique ID and sets GeneratedID.
	ID string
	// GeneratedID says that onceq generated the ID (the producer, or a
	// handler's Emit, for a task submitted without one). Such an ID is
	// unique by construction and no client knew it before it was written,
	// so it is not an idempotency key: workers keep no mark of it once its
	// run is committed. An ID you choose is one (leave GeneratedID false):
	// workers remember it for their dedup window, and a duplicate
	// submitted within it runs once.
	GeneratedID bool
	// Queue is the topic the task runs from.
	Queue string
	// Key is the partition key. Empty: the ID, or for a lane queue's task
	// the queue and the ID ("fn/resize/<ID>", PartitionKey), so that
	// duplicates of one ID meet in one partition. A task decoded from a
	// record has the record's key.
	Key []byte
	// Payload is opaque to onceq.
	Payload []byte
	// Headers are the record's other headers, passed through untouched.
	Headers []Header

	// Due is the earliest time the task may run. Zero: now.
	Due time.Time
	// Delay is relative to submission and resolved into Due by Resolve.
	// Set Due or Delay, not both.
	Delay time.Duration
	// Expires is the time after which the task must not start. Zero: never.
	Expires time.Time
	// MaxAttempts bounds the runs of the task. Zero: the worker's default.
	MaxAttempts int
	// Timeout is the time-to-run of one attempt. Zero: the worker's default.
	Timeout time.Duration
	// Attempt is 1 on the first run and counts retries.
	Attempt int
	// Enqueued is the time of the first submission.
	Enqueued time.Time
	// LastError is the error of the previous attempt, if any.
	LastError string
	// Failed is when the task last failed (set on dead letters).
	Failed time.Time
	// Backoff overrides the worker's retry backoff for this task. Zero:
	// the worker's.
	Backoff Backoff
	// Requeued names the dead letter a task was requeued from
	// ("<partition>/<offset>" of the dead-letter topic). A requeued task is
	// a new incarnation of its ID: it runs even though the ID was
	// processed (dead-lettered) before, and once however often the same
	// dead letter is requeued.
	Requeued string

	// Workflow is the task's place in a workflow (package workflow writes
	// it): what a worker emits, in the transaction of the task's final
	// outcome, when the task succeeds or fails for good (the next steps of
	// a chain, a report to a group's join, callbacks). Opaque: leave it
	// unset and build workflows with package workflow.
	Workflow []byte
	// Input is what the step before the task in a workflow returned: the
	// result of the task before it in a chain, or the results of the group
	// before it (package workflow decodes them). Nil outside workflows.
	Input []byte
	// Cancel, when set, says why the task must not run: a worker ends it
	// canceled, with this text as its error, without running it. The
	// workflow service sets it on a task whose dependency did not succeed.
	Cancel string
	// Priority orders the tasks a worker may start: of the tasks it has
	// fetched and could start now, it starts those of the highest
	// priority first, 0 (the default) to MaxPriority. Tasks of one key
	// still run in their order, whatever their priorities.
	Priority int
}

// Backoff is an exponential retry backoff: attempt n (counting from 1)
// waits Base*Factor^(n-1), at most Max, with jitter applied by the worker.
type Backoff struct {
	Base   time.Duration
	Factor float64
	Max    time.Duration
}

// IsZero reports whether b is unset.
func (b Backoff) IsZero() bool { return b == Backoff{} }

// Delay returns the backoff before attempt+1 after attempt failed, without
// jitter.
func (b Backoff) Delay(attempt int) time.Duration {
	d := float64(b.Base)
	for i := 1; i < attempt && d < float64(b.Max); i++ {
		d *= b.Factor
	}
	return min(time.Duration(d), b.Max)
}

// IdempotencyKey reports whether the task's DedupKey is an idempotency key:
// the first attempt of an ID a client chose, or of a requeued incarnation
// (a dead letter may be requeued twice). Those a worker remembers for its
// dedup window. The rest reach their queue once by construction: a
// generated ID, and a retry, which a worker's transaction writes once.
func (t *Task) IdempotencyKey() bool {
	return t.Attempt <= 1 && (!t.GeneratedID || t.Requeued != "")
}

// CompareSubmissions orders two tasks submitted within one millisecond,
// the wire format's precision for Enqueued, by their IDs when onceq
// generated both (GeneratedID): a producer generates time-ordered IDs that
// rise with each of its submissions, so the one first submitted through a
// producer sorts first. It returns 0 when an ID is a client's, which
// tells nothing of when its task came: the caller keeps its own order
// (a partition's).
func CompareSubmissions(a, b *Task) int {
	if !a.GeneratedID || !b.GeneratedID {
		return 0
	}
	return strings.Compare(a.ID, b.ID)
}

// DedupKey is what a worker remembers a processed run of the task by: the
// ID for a first attempt, with "#<attempt>" for a retry, and with
// "@<requeued>" for a requeued incarnation. A resubmitted duplicate (attempt
// 1) meets the ID's mark even while the original is being retried; each
// retry attempt runs once. A lane queue's keys start with the queue and
// LaneSep ("fn/resize/<ID>"): the lane queues of a lane share its
// partitions, and each has IDs of its own.
func (t *Task) DedupKey() string {
	k := t.ID
	if IsLaneQueue(t.Queue) {
		k = t.Queue + string(LaneSep) + k
	}
	if t.Requeued != "" {
		k += "@" + t.Requeued
	}
	if t.Attempt > 1 {
		k += "#" + strconv.Itoa(t.Attempt)
	}
	return k
}

// PartitionKey returns the key the record is partitioned by: Key or, when
// Key is empty, the ID; for a lane queue's task, its queue, LaneSep and
// the ID ("fn/resize/<ID>"), since the same ID in two lane queues of a
// lane is two tasks, which must not share a key's order.
func (t *Task) PartitionKey() []byte {
	switch {
	case len(t.Key) > 0:
		return t.Key
	case IsLaneQueue(t.Queue):
		return []byte(t.Queue + string(LaneSep) + t.ID)
	}
	return []byte(t.ID)
}

// Resolve fills in what submission decides: Due from Delay, Enqueued and
// Attempt. It does not assign an ID. Times are cut to milliseconds, the
// wire format's precision, so a resolved task survives a round trip; a Due
// computed from Delay is rounded up instead, so it is never early.
func (t *Task) Resolve(now time.Time) {
	if t.Delay > 0 && t.Due.IsZero() {
		// Round up: a task is never due before now+Delay.
		t.Due = now.Add(t.Delay).Add(time.Millisecond - 1)
		t.Delay = 0
	}
	now = now.Truncate(time.Millisecond)
	if t.Enqueued.IsZero() {
		t.Enqueued = now
	}
	if t.Attempt == 0 {
		t.Attempt = 1
	}
	t.Due = truncMS(t.Due)
	t.Expires = truncMS(t.Expires)
	t.Enqueued = truncMS(t.Enqueued)
	t.Failed = truncMS(t.Failed)
	if t.Timeout != 0 {
		t.Timeout = t.Timeout.Truncate(time.Millisecond)
	}
}

// DelayedAt reports whether the task is due after now.
func (t *Task) DelayedAt(now time.Time) bool {
	return !t.Due.IsZero() && t.Due.After(now)
}

// Clone returns a deep copy of t.
func (t *Task) Clone() Task {
	c := *t
	c.Key = cloneBytes(t.Key)
	c.Payload = cloneBytes(t.Payload)
	c.Workflow = cloneBytes(t.Workflow)
	c.Input = cloneBytes(t.Input)
	if t.Headers != nil {
		c.Headers = make([]Header, len(t.Headers))
		for i, h := range t.Headers {
			c.Headers[i] = Header{Key: h.Key, Value: cloneBytes(h.Value)}
		}
	}
	return c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func truncMS(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli())
}
