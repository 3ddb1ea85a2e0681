package dlq

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

const topic = "onceq-dlq-emails"

// deadTask is a task as a worker dead-letters it after its third attempt.
func deadTask(id string, failed time.Time) onceq.Task {
	return onceq.Task{ID: id, Queue: "emails", Key: []byte("user-7"), Payload: []byte("hello"),
		Headers:  []onceq.Header{{Key: "trace", Value: []byte("abc")}},
		Due:      time.UnixMilli(1_800_000_000_000),
		Enqueued: time.UnixMilli(1_799_000_000_000), MaxAttempts: 3, Attempt: 3,
		LastError: "max_attempts: attempt 3 of 3: smtp: 550", Failed: failed}
}

func letterAt(t onceq.Task, partition int32, offset int64) Letter {
	r := t.Record(topic)
	r.Partition, r.Offset = partition, offset
	return Decode(r, "emails")
}

func TestParseError(t *testing.T) {
	for _, tc := range []struct{ in, reason, text string }{
		{"max_attempts: attempt 3 of 3: boom", ReasonMaxAttempts, "attempt 3 of 3: boom"},
		{"expired: expired at 2026-01-01T00:00:00Z", ReasonExpired, "expired at 2026-01-01T00:00:00Z"},
		{"failed: ", ReasonFailed, ""},
		{"malformed: onceq: header onceq-due: x", ReasonMalformed, "onceq: header onceq-due: x"},
		{"boom", ReasonUnknown, "boom"},
		{"", ReasonUnknown, ""},
		{"HTTP 500: oops", ReasonUnknown, "HTTP 500: oops"},
		{": no reason", ReasonUnknown, ": no reason"},
		{"some_new_reason: text", "some_new_reason", "text"},
		{strings.Repeat("a", maxReasonLen+1) + ": x", ReasonUnknown, strings.Repeat("a", maxReasonLen+1) + ": x"},
	} {
		if r, text := ParseError(tc.in); r != tc.reason || text != tc.text {
			t.Errorf("ParseError(%q) = %q, %q; want %q, %q", tc.in, r, text, tc.reason, tc.text)
		}
	}
}

func TestDecodeWellFormed(t *testing.T) {
	failed := time.UnixMilli(1_800_000_001_000)
	l := letterAt(deadTask("t1", failed), 1, 42)
	if l.Malformed != nil || l.Partition != 1 || l.Offset != 42 || l.Task.ID != "t1" || l.Task.Queue != "emails" ||
		l.Task.Attempt != 3 || l.Reason != ReasonMaxAttempts || l.Error != "attempt 3 of 3: smtp: 550" ||
		!l.Failed.Equal(failed) || l.Size() != 5 || len(l.Task.Headers) != 1 {
		t.Fatalf("letter %+v", l)
	}
	// Without onceq-queue (written by another tool) the queue is the
	// topic's.
	r := &kgo.Record{Topic: topic, Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: onceq.HeaderError, Value: []byte("boom")}}}
	l = Decode(r, "emails")
	if l.Malformed != nil || l.Task.Queue != "emails" || l.Task.ID != topic+"/0/0" || l.Reason != ReasonUnknown || !l.Failed.IsZero() {
		t.Fatalf("letter %+v", l)
	}
}

// TestDecodeMalformed: a worker copies a malformed record raw and adds
// onceq-error and onceq-failed; what can be read of it is shown.
func TestDecodeMalformed(t *testing.T) {
	r := &kgo.Record{Topic: topic, Partition: 0, Offset: 3, Key: []byte("k"), Value: []byte("raw"), Headers: []kgo.RecordHeader{
		{Key: onceq.HeaderID, Value: []byte("bad-due")},
		{Key: onceq.HeaderDue, Value: []byte("tomorrow")},
		{Key: onceq.HeaderAttempt, Value: []byte("2")},
		{Key: "trace", Value: []byte("abc")},
		{Key: onceq.HeaderError, Value: []byte("malformed: onceq: header onceq-due \"tomorrow\": malformed header")},
		{Key: onceq.HeaderFailed, Value: []byte("1800000000000")},
	}}
	l := Decode(r, "emails")
	if l.Malformed == nil || !errors.Is(l.Malformed, onceq.ErrMalformedHeader) {
		t.Fatalf("Malformed = %v", l.Malformed)
	}
	if l.Task.ID != "bad-due" || l.Task.Queue != "emails" || l.Task.Attempt != 2 || l.Reason != ReasonMalformed ||
		!strings.HasPrefix(l.Error, "onceq: header onceq-due") || l.Failed.UnixMilli() != 1_800_000_000_000 || string(l.Task.Payload) != "raw" {
		t.Fatalf("letter %+v", l)
	}
	if len(l.Task.Headers) != 2 || l.Task.Headers[0].Key != onceq.HeaderDue || l.Task.Headers[1].Key != "trace" {
		t.Fatalf("headers %+v: want the bad onceq-due and trace", l.Task.Headers)
	}
	if _, err := Incarnation(&l, "emails", false, time.Now()); !errors.Is(err, ErrNotRequeueable) || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("Incarnation of a malformed letter: %v", err)
	}
}

func TestIncarnation(t *testing.T) {
	now := time.UnixMilli(1_800_000_010_000)
	dead := deadTask("t1", now.Add(-time.Second))
	dead.Expires = now.Add(-time.Minute) // past: cleared
	l := letterAt(dead, 2, 9)
	for _, reset := range []bool{false, true} {
		inc, err := Incarnation(&l, "emails", reset, now)
		if err != nil {
			t.Fatal(err)
		}
		wantAttempt, wantKey := 3, "t1@2/9#3"
		if reset {
			wantAttempt, wantKey = 1, "t1@2/9"
		}
		if inc.ID != "t1" || inc.Queue != "emails" || string(inc.Key) != "user-7" || string(inc.Payload) != "hello" ||
			len(inc.Headers) != 1 || inc.Requeued != "2/9" || !inc.Failed.IsZero() || !inc.Due.Equal(now) || !inc.Expires.IsZero() ||
			inc.LastError != dead.LastError || inc.MaxAttempts != 3 || inc.Attempt != wantAttempt || inc.DedupKey() != wantKey {
			t.Fatalf("reset %v: incarnation %+v", reset, inc)
		}
		back, err := onceq.FromRecord(inc.Record("emails"))
		if err != nil || back.Requeued != "2/9" || back.DedupKey() != wantKey {
			t.Fatalf("round trip: %+v, %v", back, err)
		}
	}
	// A future expiry is kept.
	dead.Expires = now.Add(time.Hour)
	l = letterAt(dead, 0, 0)
	if inc, err := Incarnation(&l, "emails", false, now); err != nil || !inc.Expires.Equal(dead.Expires) {
		t.Fatalf("future expiry: %+v, %v", inc.Expires, err)
	}
	// An unknown onceq-* header passes through decoding but a producer
	// refuses it.
	dead.Headers = append(dead.Headers, onceq.Header{Key: "onceq-delay", Value: []byte("5s")})
	l = letterAt(dead, 0, 1)
	if _, err := Incarnation(&l, "emails", false, now); !errors.Is(err, ErrNotRequeueable) || !strings.Contains(err.Error(), "onceq-delay") {
		t.Fatalf("unknown onceq header: %v", err)
	}
}

func TestChoose(t *testing.T) {
	base := time.UnixMilli(1_800_000_000_000)
	first := deadTask("a", base)
	again := deadTask("a", base.Add(time.Minute)) // a requeued incarnation failed again
	again.Requeued = "0/0"
	tie := deadTask("b", base)
	bad := &kgo.Record{Topic: topic, Partition: 1, Offset: 5, Headers: []kgo.RecordHeader{
		{Key: onceq.HeaderID, Value: []byte("m")}, {Key: onceq.HeaderTimeout, Value: []byte("-1")}}}
	noID := &kgo.Record{Topic: topic, Partition: 1, Offset: 6, Headers: []kgo.RecordHeader{{Key: onceq.HeaderID, Value: []byte("a b")}}}
	letters := []Letter{
		letterAt(first, 0, 0), letterAt(tie, 1, 1), letterAt(again, 0, 3), letterAt(tie, 1, 4),
		Decode(bad, "emails"), Decode(noID, "emails"),
	}
	now := base.Add(time.Hour)

	rs, problems := Choose("emails", letters, nil, false, now)
	if got := coords(rs); got != "a@0/3 b@1/4" {
		t.Errorf("all: chose %s, want a@0/3 (newest failure) b@1/4 (tie: later offset)", got)
	}
	if len(problems) != 2 || !errors.Is(problems[0], ErrNotRequeueable) || !errors.Is(problems[1], ErrNotRequeueable) {
		t.Errorf("all: problems %v, want the two malformed letters", problems)
	}
	if rs[0].Task.Requeued != "0/3" {
		t.Errorf("requeued %q", rs[0].Task.Requeued)
	}

	rs, problems = Choose("emails", letters, []string{"b", "m", "zz"}, true, now)
	if got := coords(rs); got != "b@1/4" || rs[0].Task.Attempt != 1 {
		t.Errorf("by ID: chose %s", got)
	}
	if len(problems) != 2 || !errors.Is(problems[0], ErrNotRequeueable) || !strings.Contains(problems[0].Error(), `"m"`) ||
		!errors.Is(problems[1], ErrNotFound) || !strings.Contains(problems[1].Error(), `"zz"`) {
		t.Errorf("by ID: problems %v", problems)
	}
}

func coords(rs []Requeue) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Task.ID+"@"+Coordinates(&r.From))
	}
	return strings.Join(s, " ")
}

func TestStats(t *testing.T) {
	var s Stats
	base := time.UnixMilli(1_800_000_000_000)
	s.Add(letterAt(deadTask("a", base.Add(time.Minute)), 0, 0))
	s.Add(letterAt(deadTask("b", base), 0, 1))
	s.Add(Decode(&kgo.Record{Topic: topic, Headers: []kgo.RecordHeader{{Key: onceq.HeaderError, Value: []byte("expired: late")}}}, "emails"))
	if s.DeadLetters != 3 || s.ByReason[ReasonMaxAttempts] != 2 || s.ByReason[ReasonExpired] != 1 ||
		!s.Oldest.Equal(base) || !s.Newest.Equal(base.Add(time.Minute)) {
		t.Fatalf("stats %+v", s)
	}
}

// FuzzDecode decodes dead letters with fuzzed onceq headers, chosen by the
// bits of present, duplicates and unknown ones included: it never panics,
// a reason is always found, the error text is what onceq-error can hold,
// and a letter that can be requeued becomes a record a worker decodes as a
// new incarnation at the letter's coordinates.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("k"), []byte("v"), uint16(0x1f), "a", "3", "max_attempts: boom", "1800000000000", "trace", "x")
	f.Add([]byte(nil), []byte(nil), uint16(0x1ff), "a", "0", "malformed: bad", "01", "onceq-x", "soon")
	f.Add([]byte(""), []byte("p"), uint16(0x18), "", "", "expired: x", "1", "", "0/1")
	now := time.UnixMilli(1_800_000_000_000)
	f.Fuzz(func(t *testing.T, key, value []byte, present uint16, id, attempt, errText, failed, otherKey, other string) {
		candidates := []kgo.RecordHeader{
			{Key: onceq.HeaderID, Value: []byte(id)},
			{Key: onceq.HeaderQueue, Value: []byte("emails")},
			{Key: onceq.HeaderAttempt, Value: []byte(attempt)},
			{Key: onceq.HeaderError, Value: []byte(errText)},
			{Key: onceq.HeaderFailed, Value: []byte(failed)},
			{Key: otherKey, Value: []byte(other)},
			{Key: onceq.HeaderID, Value: []byte(other)},
			{Key: onceq.HeaderRequeued, Value: []byte(other)},
			{Key: onceq.HeaderDue, Value: []byte(other)},
			{Key: onceq.HeaderExpires, Value: []byte(failed)},
		}
		var hs []kgo.RecordHeader
		for i, h := range candidates {
			if present&(1<<i) != 0 {
				hs = append(hs, h)
			}
		}
		r := &kgo.Record{Topic: topic, Partition: 3, Offset: 17, Key: key, Value: value, Headers: hs}
		l := Decode(r, "emails")
		if l.Reason == "" || len(l.Error) > onceq.MaxErrorLen || l.Partition != 3 || l.Offset != 17 || l.Task.Attempt < 1 {
			t.Fatalf("letter %+v", l)
		}
		if l.Task.ID != "" && onceq.ValidateID(l.Task.ID) != nil {
			t.Fatalf("invalid ID %q", l.Task.ID)
		}
		inc, err := Incarnation(&l, "emails", false, now)
		if err != nil {
			if !errors.Is(err, ErrNotRequeueable) {
				t.Fatalf("Incarnation error %v does not wrap ErrNotRequeueable", err)
			}
			return
		}
		if l.Malformed != nil {
			t.Fatal("a malformed letter was requeued")
		}
		back, err := onceq.FromRecord(inc.Record("emails"))
		if err != nil {
			t.Fatalf("decoding the incarnation: %v", err)
		}
		if back.ID != l.Task.ID || back.Requeued != "3/17" || back.Attempt != l.Task.Attempt || !back.Failed.IsZero() ||
			!strings.HasPrefix(back.DedupKey(), l.Task.ID+"@3/17") {
			t.Fatalf("incarnation read back as %+v", back)
		}
	})
}

// FuzzParseError: a reason and text written as a worker writes them come
// back apart; anything else is ReasonUnknown with the whole text.
func FuzzParseError(f *testing.F) {
	f.Add("max_attempts", "attempt 3 of 3: boom")
	f.Add("", "no reason")
	f.Add("Bad Reason", "x")
	f.Fuzz(func(t *testing.T, reason, text string) {
		s := reason + ": " + text
		r, got := ParseError(s)
		if isReason(reason) {
			if r != reason || got != text {
				t.Fatalf("ParseError(%q) = %q, %q", s, r, got)
			}
			return
		}
		if r != ReasonUnknown && !strings.HasPrefix(s, r+": ") {
			t.Fatalf("ParseError(%q) = %q, %q", s, r, got)
		}
		if r == ReasonUnknown && got != s {
			t.Fatalf("ParseError(%q) = %q, %q: want the whole text", s, r, got)
		}
	})
}
