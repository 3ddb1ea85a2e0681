package onceq

import (
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
		return invalid(ErrInvalidQueue, "queue", name, "at most %d bytes", MaxQueueLen)
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

// ValidateTopic checks any topic name, reserved or not, against Kafka's
// rules. Internal topics (delay buckets, dead letters, changelogs) use it.
func ValidateTopic(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > MaxQueueLen {
		return invalid(ErrInvalidQueue, "topic", name, "a topic name has 1 to %d bytes and is not \".\" or \"..\"", MaxQueueLen)
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

// Validate checks a task before submission. maxMessageBytes is the largest
// record the broker accepts; zero or less means DefaultMaxMessageBytes.
// An empty ID is allowed here: the producer assigns one.
func (t *Task) Validate(maxMessageBytes int) error {
	if err := ValidateQueue(t.Queue); err != nil {
		return err
	}
	if t.ID != "" {
		if err := ValidateID(t.ID); err != nil {
			return err
		}
	}
	if t.Delay < 0 {
		return invalid(ErrNegativeDelay, "delay", t.Delay.String(), "a delay is zero or positive")
	}
	if t.Delay > 0 && !t.Due.IsZero() {
		return invalid(ErrInvalidTask, "delay", t.Delay.String(), "set Due or Delay, not both")
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
	if t.MaxAttempts < 0 {
		return invalid(ErrInvalidTask, "max attempts", itoa(int64(t.MaxAttempts)), "zero (the worker's default) or positive")
	}
	if t.Attempt < 0 {
		return invalid(ErrInvalidTask, "attempt", itoa(int64(t.Attempt)), "zero (first run) or positive")
	}
	if !t.Backoff.IsZero() {
		if _, err := ParseBackoff(FormatBackoff(t.Backoff)); err != nil || t.Backoff.Base%time.Millisecond != 0 || t.Backoff.Max%time.Millisecond != 0 {
			return invalid(ErrInvalidTask, "backoff", FormatBackoff(t.Backoff), "base and max are positive whole milliseconds with max >= base, and the factor is from 1 to 100")
		}
	}
	if t.Timeout < 0 {
		return invalid(ErrInvalidTask, "timeout", t.Timeout.String(), "zero (the worker's default) or positive")
	}
	for _, h := range t.Headers {
		if strings.HasPrefix(h.Key, headerPrefix) {
			return invalid(ErrMalformedHeader, "header", h.Key, "headers starting with %q belong to onceq: set the Task field instead", headerPrefix)
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
	return n + 9*24 + len(t.ID) + len(t.Queue) + len(t.LastError) // onceq headers
}
