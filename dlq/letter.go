package dlq

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// Reasons a worker or the delay service dead-letters a task: the prefix
// of onceq-error.
const (
	ReasonFailed      = "failed"       // the handler asked for no retry (SkipRetry)
	ReasonMaxAttempts = "max_attempts" // the last attempt failed
	ReasonExpired     = "expired"      // past onceq-expires when it would start
	ReasonMalformed   = "malformed"    // its onceq headers do not decode
	ReasonTooLarge    = "too_large"    // the brokers refused a record it writes (output, retry) as too large
	ReasonNoQueue     = "no_queue"     // its queue does not exist when it is due
	// ReasonUnknown is a dead letter whose onceq-error has no reason
	// prefix, such as one written by another tool.
	ReasonUnknown = "unknown"
)

// maxReasonLen bounds what ParseError takes for a reason.
const maxReasonLen = 32

// Letter is one dead letter.
type Letter struct {
	// Partition and Offset locate the dead letter in its topic.
	Partition int32
	Offset    int64
	// Task is the dead-lettered task. For a malformed dead letter it holds
	// what could be read: the ID, attempt and queue when their headers
	// decode, the key, the payload, and every other header as it is.
	Task onceq.Task
	// Reason is one of the Reason constants, or another word a newer
	// worker wrote.
	Reason string
	// Error is the error text after the reason.
	Error string
	// Failed is when the task was dead-lettered; zero if unknown.
	Failed time.Time
	// Malformed is why the record does not decode as a task, nil for a
	// well-formed one. A malformed dead letter cannot be requeued.
	Malformed error
}

// Size is the payload's size in bytes.
func (l *Letter) Size() int { return len(l.Task.Payload) }

// Decode reads a dead letter of queue from its record. It never fails: a
// record whose onceq headers do not decode is a Letter with Malformed set.
func Decode(r *kgo.Record, queue string) Letter {
	l := Letter{Partition: r.Partition, Offset: r.Offset}
	t, err := onceq.FromRecord(r)
	if err != nil {
		l.Malformed = err
		t = decodeLoose(r)
	}
	if t.Queue == r.Topic { // no onceq-queue header
		t.Queue = queue
	}
	l.Task, l.Failed = t, t.Failed
	l.Reason, l.Error = ParseError(t.LastError)
	return l
}

// decodeLoose reads what it can of a record whose onceq headers do not
// decode together: each header on its own, the ones onceq uses to show a
// dead letter (ID, queue, attempt, error, failure time) kept when valid,
// every other header passed through. A worker copies a malformed record
// raw and adds onceq-error and onceq-failed.
func decodeLoose(r *kgo.Record) onceq.Task {
	t := onceq.Task{Queue: r.Topic, Key: r.Key, Payload: r.Value, Attempt: 1}
	if len(t.Key) == 0 {
		t.Key = nil
	}
	for _, h := range r.Headers {
		if keep, ok := looseKept[h.Key]; ok {
			if one, err := onceq.FromRecord(&kgo.Record{Topic: r.Topic, Headers: []kgo.RecordHeader{h}}); err == nil {
				keep(&t, one)
				continue
			}
		}
		t.Headers = append(t.Headers, onceq.Header{Key: h.Key, Value: h.Value})
	}
	return t
}

// looseKept are the headers decodeLoose keeps when valid, each with how it
// copies its field from the task decoded from that header alone.
var looseKept = map[string]func(t *onceq.Task, one onceq.Task){
	onceq.HeaderID:      func(t *onceq.Task, one onceq.Task) { t.ID = one.ID },
	onceq.HeaderQueue:   func(t *onceq.Task, one onceq.Task) { t.Queue = one.Queue },
	onceq.HeaderAttempt: func(t *onceq.Task, one onceq.Task) { t.Attempt = one.Attempt },
	onceq.HeaderError:   func(t *onceq.Task, one onceq.Task) { t.LastError = one.LastError },
	onceq.HeaderFailed:  func(t *onceq.Task, one onceq.Task) { t.Failed = one.Failed },
}

// ParseError splits an onceq-error value "<reason>: <text>" into its
// reason and text. A value without a reason (a lower-case word of letters
// and '_' before ": ") has ReasonUnknown and is the text as a whole.
func ParseError(s string) (reason, text string) {
	r, rest, ok := strings.Cut(s, ": ")
	if !ok || !isReason(r) {
		return ReasonUnknown, s
	}
	return r, rest
}

func isReason(s string) bool {
	if s == "" || len(s) > maxReasonLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < 'a' || s[i] > 'z') && s[i] != '_' {
			return false
		}
	}
	return true
}
