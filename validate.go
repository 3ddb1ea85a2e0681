package onceq

import (
	"strconv"
	"strings"
	"time"
)

// recordOverhead is a generous bound on what the Kafka record batch adds
// to a single record: batch header (61 bytes) plus per-record varints.
const recordOverhead = 128

// ValidateQueue checks a queue name against Kafka's topic rules and onceq's
// reserved prefixes ("onceq-" and "__").
func ValidateQueue(name string) error {
	switch {
	case name == "":
		return invalid(ErrInvalidQueue, "queue", name, "the name is empty: give a queue name such as \"emails\"")
	case name == "." || name == "..":
		return invalid(ErrInvalidQueue, "queue", name, "\".\" and \"..\" are not allowed by Kafka")
	case len(name) > MaxQueueLen:
		return invalid(ErrInvalidQueue, "queue", name, "%d bytes: at most %d, so that its dead-letter topic onceq-dlq-<queue> fits Kafka's limit of %d on topic names",
			len(name), MaxQueueLen, MaxTopicLen)
	case strings.HasPrefix(name, "onceq-"), strings.HasPrefix(name, "__"):
		return invalid(ErrReservedQueue, "queue", name, "names starting with \"onceq-\" or \"__\" are reserved for onceq and Kafka: choose another name")
	}
	for i := 0; i < len(name); i++ {
		if !queueByte(name[i]) {
			return invalid(ErrInvalidQueue, "queue", name, "use letters, digits, '.', '_' or '-'")
		}
	}
	return nil
}

// ValidateTaskQueue checks the queue of a task: a queue ValidateAnyQueue
// accepts (a topic's or a lane queue's), or WorkflowQueue, the one
// reserved name a task may have (the workflow service's).
func ValidateTaskQueue(name string) error {
	if name == WorkflowQueue {
		return nil
	}
	return ValidateAnyQueue(name)
}

// ValidateTopic checks any topic name, reserved or not, against Kafka's
// rules. Internal topics (delay buckets, dead letters, changelogs) use it.
func ValidateTopic(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > MaxTopicLen {
		return invalid(ErrInvalidQueue, "topic", name, "a topic name has 1 to %d bytes and is not \".\" or \"..\"", MaxTopicLen)
	}
	for i := 0; i < len(name); i++ {
		if !queueByte(name[i]) {
			return invalid(ErrInvalidQueue, "topic", name, "use letters, digits, '.', '_' or '-'")
		}
	}
	return nil
}

func queueByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ValidateID checks a task ID: 1 to 256 printable ASCII bytes.
func ValidateID(id string) error {
	switch {
	case id == "":
		return invalid(ErrInvalidID, "id", id, "the ID is empty: leave it unset to have one assigned, or give 1 to %d printable bytes", MaxIDLen)
	case len(id) > MaxIDLen:
		return invalid(ErrInvalidID, "id", id, "at most %d bytes", MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !printable(id[i]) {
			return invalid(ErrInvalidID, "id", id, "byte %d is not printable ASCII: use bytes 0x21 to 0x7e (no spaces or control characters)", i)
		}
	}
	return nil
}

func printable(c byte) bool { return c > ' ' && c < 0x7f }

// Validate checks a task before submission, against the same limits the
// decoder (FromRecord) applies to every header: a task Validate accepts is
// written as a record a worker reads back unchanged, never dead-lettered as
// malformed. maxMessageBytes is the largest record the broker accepts; zero
// or less means DefaultMaxMessageBytes. An empty ID is allowed here: the
// producer assigns one.
//
// Errors are *Error values whose Field names the task's field as the JSON
// lines of Spec do: "queue", "id", "delay", "due", "expires", "enqueued",
// "failed", "max_attempts", "attempt", "timeout", "backoff", "requeued",
// "header" and "payload".
func (t *Task) Validate(maxMessageBytes int) error {
	if err := ValidateTaskQueue(t.Queue); err != nil {
		return err
	}
	if t.ID != "" {
		if err := ValidateID(t.ID); err != nil {
			return err
		}
	}
	// Most tasks set none of the fields below: each group is checked only
	// when one of its fields is set, since every submission comes here.
	if t.Delay != 0 || !t.Due.IsZero() || !t.Expires.IsZero() || !t.Enqueued.IsZero() || !t.Failed.IsZero() {
		if err := t.validateTimes(); err != nil {
			return err
		}
	}
	if t.MaxAttempts != 0 || t.Attempt != 0 {
		if err := checkCount("max_attempts", t.MaxAttempts, "zero (the worker's default)"); err != nil {
			return err
		}
		if err := checkCount("attempt", t.Attempt, "zero (a first run)"); err != nil {
			return err
		}
	}
	if !t.Backoff.IsZero() {
		if _, err := ParseBackoff(FormatBackoff(t.Backoff)); err != nil || t.Backoff.Base%time.Millisecond != 0 || t.Backoff.Max%time.Millisecond != 0 {
			return invalid(ErrInvalidTask, "backoff", FormatBackoff(t.Backoff), "base and max are positive whole milliseconds up to a year with max >= base, and the factor is from 1 to 100")
		}
	}
	if t.Timeout < 0 || t.Timeout > 0 && t.Timeout < time.Millisecond {
		// A timeout under a millisecond would be written as none: the
		// worker's default.
		return invalid(ErrInvalidTask, "timeout", t.Timeout.String(), "zero (the worker's default) or at least 1ms: the wire format counts milliseconds")
	}
	if t.Priority != 0 {
		if err := ValidatePriority(t.Priority); err != nil {
			return err
		}
	}
	if t.Requeued != "" {
		if err := ValidateID(t.Requeued); err != nil {
			return invalid(ErrInvalidTask, "requeued", t.Requeued, "want <partition>/<offset> of a dead letter")
		}
	}
	for _, h := range t.Headers {
		if strings.HasPrefix(h.Key, HeaderPrefix) {
			if headerBit(h.Key) == 0 {
				return unknownHeader(h.Key)
			}
			return invalid(ErrMalformedHeader, "header", h.Key, "the header is written from the task's %s field: set that instead", headerField(h.Key))
		}
	}
	if maxMessageBytes <= 0 {
		maxMessageBytes = DefaultMaxMessageBytes
	}
	if size := t.wireSize(); size > maxMessageBytes {
		return invalid(ErrTooLarge, "payload", "", "the record is %d bytes with key and headers, over the broker's limit of %d: make the payload smaller or raise the broker's message.max.bytes", size, maxMessageBytes)
	}
	return nil
}

// ValidatePriority checks a task's priority: 0 (the default, the
// lowest) to MaxPriority.
func ValidatePriority(p int) error {
	if p < 0 || p > MaxPriority {
		return invalid(ErrInvalidTask, "priority", strconv.Itoa(p), "want %s", PriorityRange)
	}
	return nil
}

// validateTimes checks the delay and the times of a task that sets one.
func (t *Task) validateTimes() error {
	if t.Delay < 0 {
		return invalid(ErrNegativeDelay, "delay", t.Delay.String(), "a delay is zero or positive")
	}
	if t.Delay > 0 && !t.Due.IsZero() {
		return invalid(ErrInvalidTask, "delay", t.Delay.String(), "set Due or Delay, not both")
	}
	for _, tm := range []struct {
		field string
		t     time.Time
	}{{"due", t.Due}, {"expires", t.Expires}, {"enqueued", t.Enqueued}, {"failed", t.Failed}} {
		if err := checkTime(tm.field, tm.t); err != nil {
			return err
		}
	}
	if !t.Expires.IsZero() {
		due := t.Due
		if due.IsZero() && t.Delay > 0 {
			due = time.Now().Add(t.Delay)
		}
		if !due.IsZero() && t.Expires.Before(due) {
			return invalid(ErrExpiryBeforeDue, "expires", t.Expires.UTC().Format(time.RFC3339Nano),
				"the task would expire before it is due at %s: move the expiry after the due time", due.UTC().Format(time.RFC3339Nano))
		}
	}
	return nil
}

// checkTime checks a time field against the wire format's range: unset
// (zero), or from the unix epoch to MaxUnixMilli.
func checkTime(field string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if ms := t.UnixMilli(); ms < 0 || ms > MaxUnixMilli {
		return invalid(ErrInvalidTask, field, t.UTC().Format(time.RFC3339Nano), "want a time from %s to %s (unix milliseconds 0 to %d)",
			time.UnixMilli(0).UTC().Format(time.RFC3339), time.UnixMilli(MaxUnixMilli).UTC().Format(time.RFC3339Nano), MaxUnixMilli)
	}
	return nil
}

// checkCount checks an attempt count: zero (unset) to MaxAttemptCount.
func checkCount(field string, n int, zero string) error {
	if n < 0 || n > MaxAttemptCount {
		return invalid(ErrInvalidTask, field, itoa(int64(n)), "want %s or 1 to %d", zero, MaxAttemptCount)
	}
	return nil
}

// headerField names the Task field a header of the wire format is written
// from.
func headerField(key string) string {
	switch key {
	case HeaderID:
		return "ID"
	case HeaderQueue:
		return "Queue"
	case HeaderDue:
		return "Due (or Delay)"
	case HeaderExpires:
		return "Expires"
	case HeaderAttempt:
		return "Attempt"
	case HeaderMaxAttempts:
		return "MaxAttempts"
	case HeaderTimeout:
		return "Timeout"
	case HeaderEnqueued:
		return "Enqueued"
	case HeaderError:
		return "LastError"
	case HeaderFailed:
		return "Failed"
	case HeaderBackoff:
		return "Backoff"
	case HeaderRequeued:
		return "Requeued"
	case HeaderWorkflow:
		return "Workflow (package workflow writes it)"
	case HeaderInput:
		return "Input (package workflow writes it)"
	case HeaderCancel:
		return "Cancel"
	case HeaderPriority:
		return "Priority"
	}
	return key
}

// wireSize estimates the record's size in a batch, overhead included.
func (t *Task) wireSize() int {
	key := len(t.Key)
	if key == 0 {
		key = len(t.ID)
	}
	n := recordOverhead + key + len(t.Payload)
	for _, h := range t.Headers {
		n += len(h.Key) + len(h.Value) + 2
	}
	n += len(t.Workflow) + len(t.Input) + len(t.Cancel) + 3*24
	return n + 9*24 + len(t.ID) + len(t.Queue) + len(t.LastError) // onceq headers
}
