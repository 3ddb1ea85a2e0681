package dlq

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// The encoding of dead letters. Every writer of dead letters, a worker or
// the delay service, encodes them here, so that each carries its reason
// and failure time the same way and Decode reads them all:
//
//   - onceq-error is "<reason>: <text>", cut to onceq.MaxErrorLen and made
//     ASCII as the header requires; the reason is one of the Reason
//     constants;
//   - onceq-failed is the failure time in unix milliseconds;
//   - every other header, the key and the payload are the task's.

// ErrorText is the onceq-error value of a dead letter: "<reason>: <text>",
// as ParseError splits it.
func ErrorText(reason, text string) string { return onceq.CutError(reason + ": " + text) }

// EncodeTask returns the dead letter of a task that decoded, for the
// dead-letter topic of its queue (broker.DLQTopic): the task with
// onceq-error ErrorText(reason, text) and onceq-failed at.
func EncodeTask(t *onceq.Task, reason, text string, at time.Time) *kgo.Record {
	dead := t.Clone()
	dead.LastError = ErrorText(reason, text)
	dead.Failed = at
	return dead.Record(broker.DLQTopic(t.Queue))
}

// EncodeRecord returns the dead letter of a record kept as it is (one
// whose onceq headers do not decode, say), for topic: its key, value and
// headers, with any onceq-error and onceq-failed replaced by the reason
// and at.
func EncodeRecord(r *kgo.Record, topic, reason, text string, at time.Time) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(r.Headers)+2)
	for _, h := range r.Headers {
		if h.Key != onceq.HeaderError && h.Key != onceq.HeaderFailed {
			hs = append(hs, h)
		}
	}
	hs = append(hs,
		kgo.RecordHeader{Key: onceq.HeaderError, Value: []byte(ErrorText(reason, text))},
		kgo.RecordHeader{Key: onceq.HeaderFailed, Value: strconv.AppendInt(nil, at.UnixMilli(), 10)})
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: hs}
}
