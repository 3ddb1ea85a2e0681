package onceq

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPeeks: each peek reads its header by FromRecord's rules, and tells
// an absent header from a malformed or repeated one.
func TestPeeks(t *testing.T) {
	rec := func(headers string) *kgo.Record {
		return &kgo.Record{Topic: "q", Headers: parseFuzzHeaders(headers)}
	}
	for _, c := range []struct {
		headers  string
		queue    string
		qfound   bool
		qerr     bool
		priority int
		due      int64
		dfound   bool
		derr     bool
	}{
		{headers: ""},
		{headers: "onceq-queue=emails\nonceq-priority=7\nonceq-due=1700000000000", queue: "emails", qfound: true, priority: 7, due: 1700000000000, dfound: true},
		{headers: "onceq-queue=fn/resize\nonceq-due=0", queue: "fn/resize", qfound: true, dfound: true},
		{headers: "onceq-queue=a\nonceq-queue=a", qerr: true},
		{headers: "onceq-queue=no spaces", qerr: true},
		{headers: "onceq-priority=10"},
		{headers: "onceq-priority=07"},
		{headers: "onceq-priority=3\nonceq-priority=3"},
		{headers: "onceq-due=253402300800000", derr: true},
		{headers: "onceq-due=12a", derr: true},
		{headers: "onceq-due=1\nonceq-due=1", derr: true},
	} {
		r := rec(c.headers)
		q, found, err := PeekQueue(r)
		if q != c.queue || found != c.qfound || (err != nil) != c.qerr {
			t.Errorf("%q: PeekQueue = %q, %v, %v; want %q, %v, error %v", c.headers, q, found, err, c.queue, c.qfound, c.qerr)
		}
		if p := PeekPriority(r); p != c.priority {
			t.Errorf("%q: PeekPriority = %d, want %d", c.headers, p, c.priority)
		}
		due, found, err := PeekDue(r)
		if due != c.due || found != c.dfound || (err != nil) != c.derr {
			t.Errorf("%q: PeekDue = %d, %v, %v; want %d, %v, error %v", c.headers, due, found, err, c.due, c.dfound, c.derr)
		}
	}
}

// FuzzPeeks: on every record FromRecord accepts, the peeks read what it
// reads; on any other they do not panic.
func FuzzPeeks(f *testing.F) {
	f.Add("q", "onceq-queue=emails\nonceq-priority=7\nonceq-due=1700000000000")
	f.Add("lane", "onceq-queue=lane/a\nonceq-due=0")
	f.Add("q", "onceq-priority=9\nonceq-priority=9")
	f.Add("q", "onceq-queue=a b\ntrace=x")
	f.Fuzz(func(t *testing.T, topic, headers string) {
		if ValidateTopic(topic) != nil {
			return
		}
		r := &kgo.Record{Topic: topic, Headers: parseFuzzHeaders(headers)}
		q, qfound, qerr := PeekQueue(r)
		prio := PeekPriority(r)
		due, dfound, derr := PeekDue(r)
		task, err := FromRecord(r)
		if err != nil {
			return
		}
		if qerr != nil || derr != nil {
			t.Fatalf("FromRecord accepts %q, the peeks refuse it: %v, %v", headers, qerr, derr)
		}
		if !qfound {
			q = topic
		}
		if q != task.Queue || prio != task.Priority {
			t.Fatalf("%q: peeked queue %q priority %d, FromRecord %q %d", headers, q, prio, task.Queue, task.Priority)
		}
		if dfound != !task.Due.IsZero() || dfound && due != task.Due.UnixMilli() {
			t.Fatalf("%q: peeked due %d (%v), FromRecord %v", headers, due, dfound, task.Due)
		}
	})
}
