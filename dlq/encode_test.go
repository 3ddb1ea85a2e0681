package dlq

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

func TestEncodeTask(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_000)
	task := onceq.Task{ID: "t1", Queue: "emails", Key: []byte("k"), Payload: []byte("p"), Attempt: 3, MaxAttempts: 3,
		LastError: "earlier", Headers: []onceq.Header{{Key: "trace", Value: []byte("x")}}}
	r := EncodeTask(&task, ReasonMaxAttempts, "attempt 3 of 3: boom\nagain", at)
	if r.Topic != "onceq-dlq-emails" {
		t.Fatalf("topic %s", r.Topic)
	}
	l := Decode(r, "emails")
	if l.Malformed != nil || l.Reason != ReasonMaxAttempts || l.Error != "attempt 3 of 3: boom again" || !l.Failed.Equal(at) ||
		l.Task.ID != "t1" || l.Task.Attempt != 3 || len(l.Task.Headers) != 1 || task.LastError != "earlier" {
		t.Fatalf("letter %+v (task %+v)", l, task)
	}
}

// FuzzEncodeRecord: a record of any headers, encoded as a dead letter,
// carries exactly one onceq-error and one onceq-failed, and Decode reads
// back the reason, the text as the header holds it and the failure time,
// whether or not the rest of the record is a well-formed task.
func FuzzEncodeRecord(f *testing.F) {
	f.Add([]byte("k"), []byte("v"), "onceq-id=a\nonceq-error=old\nonceq-failed=5\ntrace=x", ReasonMalformed, "no valid onceq-due header", int64(1_800_000_000_000))
	f.Add([]byte(nil), []byte(nil), "onceq-attempt=0\nonceq-delay=5s", ReasonNoQueue, "queue \"q\" does not exist", int64(0))
	f.Add([]byte(""), []byte("p"), "", ReasonTooLarge, strings.Repeat("é", 2000), int64(253402300799999))
	f.Fuzz(func(t *testing.T, key, value []byte, headers, reason, text string, atMS int64) {
		if !isReason(reason) || atMS < 0 || atMS > onceq.MaxUnixMilli {
			return // writers use the Reason constants and the clock
		}
		var hs []kgo.RecordHeader
		for _, line := range strings.Split(headers, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
		}
		src := &kgo.Record{Topic: "q", Key: key, Value: value, Headers: hs}
		r := EncodeRecord(src, "onceq-dlq-q", reason, text, time.UnixMilli(atMS))
		n := 0
		for _, h := range r.Headers {
			if h.Key == onceq.HeaderError || h.Key == onceq.HeaderFailed {
				n++
			}
		}
		if n != 2 || r.Topic != "onceq-dlq-q" || string(r.Key) != string(key) || string(r.Value) != string(value) {
			t.Fatalf("dead letter %+v", r)
		}
		l := Decode(r, "q")
		wantReason, wantText := ParseError(ErrorText(reason, text))
		if l.Reason != wantReason || l.Error != wantText || l.Failed.UnixMilli() != atMS || l.Reason != reason {
			t.Fatalf("decoded reason %q, error %q, failed %v; want %q, %q, %d", l.Reason, l.Error, l.Failed, wantReason, wantText, atMS)
		}
		if len(l.Error) > onceq.MaxErrorLen {
			t.Fatalf("error text of %d bytes", len(l.Error))
		}
	})
}
