package onceq

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func fullTask() Task {
	t := Task{
		ID:          "task-1",
		Queue:       "emails",
		Key:         []byte("customer-7"),
		Payload:     []byte(`{"to":"a@b.c"}`),
		Headers:     []Header{{Key: "trace", Value: []byte("abc")}, {Key: "empty", Value: nil}},
		Due:         time.UnixMilli(1_800_000_000_123),
		Expires:     time.UnixMilli(1_800_000_100_000),
		MaxAttempts: 5,
		Timeout:     1500 * time.Millisecond,
		Attempt:     3,
		Enqueued:    time.UnixMilli(1_799_999_999_000),
		LastError:   "boom",
		Failed:      time.UnixMilli(1_800_000_000_999),
		Backoff:     Backoff{Base: 500 * time.Millisecond, Factor: 1.5, Max: time.Minute},
		Requeued:    "3/42",
		Workflow:    []byte(`{"w":"wf-1"}`),
		Input:       []byte{0, 1, 2},
		Cancel:      "dependency q/a ended dead",
		Priority:    7,
	}
	return t
}

// equalTasks compares tasks as the wire sees them: the partition key
// rather than Key, times by their millisecond.
func equalTasks(a, b Task) bool {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return -1
		}
		return t.UnixMilli()
	}
	hs := func(h []Header) []Header {
		out := []Header{}
		for _, x := range h {
			out = append(out, Header{x.Key, append([]byte{}, x.Value...)})
		}
		return out
	}
	return a.ID == b.ID && a.Queue == b.Queue &&
		bytes.Equal(a.PartitionKey(), b.PartitionKey()) && bytes.Equal(a.Payload, b.Payload) &&
		reflect.DeepEqual(hs(a.Headers), hs(b.Headers)) &&
		ms(a.Due) == ms(b.Due) && ms(a.Expires) == ms(b.Expires) && ms(a.Enqueued) == ms(b.Enqueued) &&
		a.MaxAttempts == b.MaxAttempts && a.Timeout == b.Timeout && max(a.Attempt, 1) == max(b.Attempt, 1) &&
		a.LastError == b.LastError && a.Delay == b.Delay && ms(a.Failed) == ms(b.Failed) &&
		a.Backoff == b.Backoff && a.Requeued == b.Requeued && a.GeneratedID == b.GeneratedID &&
		bytes.Equal(a.Workflow, b.Workflow) && bytes.Equal(a.Input, b.Input) && (a.Input == nil) == (b.Input == nil) && a.Cancel == b.Cancel &&
		a.Priority == b.Priority
}

func TestRecordRoundTrip(t *testing.T) {
	for _, topic := range []string{"emails", "onceq-delay-5s"} {
		task := fullTask()
		r := task.Record(topic)
		if r.Topic != topic {
			t.Fatalf("topic %q, want %q", r.Topic, topic)
		}
		got, err := FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if !equalTasks(task, got) {
			t.Fatalf("round trip through %s:\n got %+v\nwant %+v", topic, got, task)
		}
	}
}

func TestRecordHeadersMinimal(t *testing.T) {
	task := Task{ID: "x", Queue: "q"}
	task.Resolve(time.UnixMilli(5))
	r := task.Record("q")
	var keys []string
	for _, h := range r.Headers {
		keys = append(keys, h.Key)
	}
	if got := strings.Join(keys, ","); got != "onceq-id,onceq-enqueued" {
		t.Fatalf("headers %s", got)
	}
	if string(r.Key) != "x" {
		t.Fatalf("key defaults to the ID, got %q", r.Key)
	}
}

func TestFromRecordWithoutID(t *testing.T) {
	got, err := FromRecord(&kgo.Record{Topic: "q", Partition: 3, Offset: 99, Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "q/3/99" || got.Queue != "q" || got.Attempt != 1 {
		t.Fatalf("got %+v", got)
	}
}

func TestFromRecordMalformedHeaders(t *testing.T) {
	for _, tc := range []struct{ key, value string }{
		{HeaderDue, "soon"},
		{HeaderDue, "-5"},
		{HeaderDue, "+5"},
		{HeaderDue, "007"},
		{HeaderDue, ""},
		{HeaderDue, "99999999999999999999"},
		{HeaderDue, "253402300800000"}, // one past the year 9999
		{HeaderDue, "9223372036854775808"},
		{HeaderExpires, "1.5"},
		{HeaderEnqueued, "x"},
		{HeaderAttempt, "0"},
		{HeaderAttempt, "99999999999"},
		{HeaderAttempt, "2147483648"},
		{HeaderMaxAttempts, "three"},
		{HeaderTimeout, "1s"},
		{HeaderID, "has space"},
		{HeaderID, ""},
		{HeaderQueue, "a b"},
		{HeaderFailed, "yesterday"},
		{HeaderBackoff, "1000:2"},
		{HeaderBackoff, "0:2:1000"},
		{HeaderBackoff, "1000:0.5:2000"},
		{HeaderBackoff, "2000:2:1000"},
		{HeaderBackoff, "1000:2.0:2000"},
		{HeaderRequeued, "has space"},
		{HeaderPriority, "10"},
		{HeaderPriority, "-1"},
		{HeaderPriority, "high"},
		{HeaderPriority, "07"},
	} {
		r := &kgo.Record{Topic: "q", Headers: []kgo.RecordHeader{{Key: tc.key, Value: []byte(tc.value)}}}
		_, err := FromRecord(r)
		if !errors.Is(err, ErrMalformedHeader) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s=%q: got %v, want a malformed-header error naming the header", tc.key, tc.value, err)
		}
	}
	dup := &kgo.Record{Topic: "q", Headers: []kgo.RecordHeader{{Key: HeaderID, Value: []byte("a")}, {Key: HeaderID, Value: []byte("b")}}}
	if _, err := FromRecord(dup); !errors.Is(err, ErrMalformedHeader) {
		t.Errorf("duplicate onceq-id: got %v", err)
	}
}

// TestFromRecordLargestNumbers: each numeric header's largest value is
// accepted, and one more is refused (above).
func TestFromRecordLargestNumbers(t *testing.T) {
	r := &kgo.Record{Topic: "q", Headers: []kgo.RecordHeader{
		{Key: HeaderDue, Value: []byte("253402300799999")},
		{Key: HeaderAttempt, Value: []byte("2147483647")},
		{Key: HeaderMaxAttempts, Value: []byte("0")},
		{Key: HeaderTimeout, Value: []byte("9223372036854")},
	}}
	task, err := FromRecord(r)
	if err != nil || task.Due.UnixMilli() != 253402300799999 || task.Attempt != 2147483647 || task.MaxAttempts != 0 ||
		task.Timeout != 9223372036854*time.Millisecond {
		t.Fatalf("got %+v, %v", task, err)
	}
}

// TestUnknownOnceqHeaderIsMalformed pins issue 17, bug 10: a header with
// onceq's prefix that the wire format does not define (a typo of
// onceq-due, say) is malformed, so a worker dead-letters the record at once
// instead of running it early or failing its handler's emits five times.
func TestUnknownOnceqHeaderIsMalformed(t *testing.T) {
	r := &kgo.Record{Topic: "q", Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t")}, {Key: "onceq-delay", Value: []byte("5s")}}}
	_, err := FromRecord(r)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrMalformedHeader) || e.Field != "header" || e.Value != "onceq-delay" ||
		!strings.Contains(err.Error(), HeaderDue) {
		t.Fatalf("got %v, want a malformed-header error naming onceq-delay and listing the headers", err)
	}
	// Validate refuses it the same way.
	task := Task{Queue: "q", Headers: []Header{{Key: "onceq-delay", Value: []byte("5s")}}}
	if err := task.Validate(0); !errors.Is(err, ErrMalformedHeader) || !strings.Contains(err.Error(), "not a header of onceq's wire format") {
		t.Fatalf("Validate: got %v", err)
	}
	// Other headers pass through, in order.
	r = &kgo.Record{Topic: "q", Headers: []kgo.RecordHeader{{Key: "b", Value: []byte("1")}, {Key: "onceq", Value: []byte("2")}, {Key: "Onceq-Id", Value: []byte("3")}}}
	got, err := FromRecord(r)
	if err != nil || len(got.Headers) != 3 || got.Headers[0].Key != "b" || got.Headers[2].Key != "Onceq-Id" {
		t.Fatalf("got %+v, %v", got.Headers, err)
	}
}

func TestCutError(t *testing.T) {
	got := CutError("line1\nline2\tü" + strings.Repeat("x", 2000))
	if len(got) != MaxErrorLen || !strings.HasPrefix(got, "line1 line2 ?") {
		t.Fatalf("got %q (%d bytes)", got[:20], len(got))
	}
}

func TestResolve(t *testing.T) {
	now := time.UnixMilli(1000).Add(500 * time.Microsecond)
	task := Task{Queue: "q", Delay: 1500*time.Millisecond + 7*time.Microsecond}
	task.Resolve(now)
	if task.Due.UnixMilli() != 2501 || task.Delay != 0 || task.Attempt != 1 || task.Enqueued.UnixMilli() != 1000 {
		t.Fatalf("got %+v", task)
	}
}

func TestRecordIDLongTopic(t *testing.T) {
	a := RecordID(strings.Repeat("t", 249), 2147483647, 9223372036854775807)
	b := RecordID(strings.Repeat("t", 248)+"u", 2147483647, 9223372036854775807)
	if len(a) > MaxIDLen || ValidateID(a) != nil || a == b {
		t.Fatalf("ids %q (%d bytes) and %q must be valid and distinct", a, len(a), b)
	}
}

func TestDedupKey(t *testing.T) {
	for _, tc := range []struct {
		task Task
		want string
	}{
		{Task{ID: "a", Attempt: 1}, "a"},
		{Task{ID: "a"}, "a"},
		{Task{ID: "a", Attempt: 3}, "a#3"},
		{Task{ID: "a", Attempt: 1, Requeued: "0/7"}, "a@0/7"},
		{Task{ID: "a", Attempt: 2, Requeued: "0/7"}, "a@0/7#2"},
	} {
		if got := tc.task.DedupKey(); got != tc.want {
			t.Errorf("%+v: DedupKey %q, want %q", tc.task, got, tc.want)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: time.Second, Factor: 2, Max: 10 * time.Second}
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 60: 10 * time.Second} {
		if got := b.Delay(attempt); got != want {
			t.Errorf("Delay(%d) = %v, want %v", attempt, got, want)
		}
	}
}

// TestIdempotencyKey pins which runs a worker must remember for its dedup
// window: first attempts of IDs a client chose, and requeued incarnations.
func TestIdempotencyKey(t *testing.T) {
	rec := func(hs ...string) *kgo.Record {
		r := &kgo.Record{Topic: "q", Partition: 2, Offset: 9}
		for i := 0; i < len(hs); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: hs[i], Value: []byte(hs[i+1])})
		}
		return r
	}
	for _, tc := range []struct {
		name string
		rec  *kgo.Record
		key  string
		idem bool
	}{
		{"chosen ID", rec(HeaderID, "order-7"), "order-7", true},
		{"generated ID", rec(HeaderID, "0195f0e2", HeaderGeneratedID, "1"), "0195f0e2", false},
		{"no onceq-id: the offset", rec(), "q/2/9", false},
		{"retry of a chosen ID", rec(HeaderID, "order-7", HeaderAttempt, "2"), "order-7#2", false},
		{"requeued generated ID", rec(HeaderID, "0195f0e2", HeaderGeneratedID, "1", HeaderRequeued, "0/4"), "0195f0e2@0/4", true},
		{"a lane queue's ID", rec(HeaderID, "order-7", HeaderQueue, "q/eu"), "q/eu/order-7", true},
		{"a lane queue's retry", rec(HeaderID, "order-7", HeaderQueue, "q/eu", HeaderAttempt, "3"), "q/eu/order-7#3", false},
		{"a delay bucket's record of a topic's queue", rec(HeaderID, "order-7", HeaderQueue, "emails"), "order-7", true},
	} {
		task, err := FromRecord(tc.rec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		key, idem := DedupKeyOf(tc.rec)
		if key != tc.key || idem != tc.idem || task.IdempotencyKey() != tc.idem {
			t.Errorf("%s: DedupKeyOf = %q, %v; Task.IdempotencyKey %v; want %q, %v", tc.name, key, idem, task.IdempotencyKey(), tc.key, tc.idem)
		}
	}
	for _, hs := range [][]string{{HeaderGeneratedID, "1"}, {HeaderID, "a", HeaderGeneratedID, "yes"}} {
		if _, err := FromRecord(rec(hs...)); !errors.Is(err, ErrMalformedHeader) || !strings.Contains(err.Error(), HeaderGeneratedID) {
			t.Errorf("headers %q: %v, want a malformed %s", hs, err, HeaderGeneratedID)
		}
	}
}

// TestDecLen: decLen is the length strconv writes, at every power of ten,
// either side of it, and at the ends of int64.
func TestDecLen(t *testing.T) {
	ns := []int64{0, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	for p := int64(1); p > 0 && p <= math.MaxInt64/10*10; p *= 10 {
		ns = append(ns, p-1, p, p+1, -p, -p+1, -p-1)
		if p > math.MaxInt64/10 {
			break
		}
	}
	for _, n := range ns {
		if got, want := decLen(n), len(strconv.FormatInt(n, 10)); got != want {
			t.Errorf("decLen(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestEncodeRecordIntoAnyRoom: EncodeRecord writes the record Record
// writes whatever room its caller gives, none, too little or enough,
// after headers already there; values that outgrow the room stay intact;
// with room enough it allocates nothing.
func TestEncodeRecordIntoAnyRoom(t *testing.T) {
	plain := Task{ID: "0190b6e4-7d2a-7cc1-9a3e-000000000001", GeneratedID: true, Queue: "q"}
	plain.Resolve(time.UnixMilli(1_800_000_000_123))
	for _, task := range []Task{fullTask(), plain, {Queue: "q", Payload: []byte("no id")}} {
		for _, topic := range []string{task.Queue, "onceq-delay-5s"} {
			want := task.Record(topic)
			for _, room := range []int{0, 1, 8, 512} {
				var r kgo.Record
				pre := kgo.RecordHeader{Key: "before", Value: []byte("x")}
				task.EncodeRecord(&r, topic, append(make([]kgo.RecordHeader, 0, room/8+1), pre), make([]byte, 0, room))
				if r.Topic != want.Topic || !bytes.Equal(r.Key, want.Key) || !bytes.Equal(r.Value, want.Value) ||
					!reflect.DeepEqual(r.Headers, append([]kgo.RecordHeader{pre}, want.Headers...)) {
					t.Fatalf("task %q to %s, room %d:\n got %+v\nwant %+v", task.ID, topic, room, r, want)
				}
			}
		}
	}
	var r kgo.Record
	var hs [3]kgo.RecordHeader
	var values [64]byte
	if n := testing.AllocsPerRun(100, func() { plain.EncodeRecord(&r, "q", hs[:0], values[:0]) }); n != 0 {
		t.Fatalf("a plain task into room enough: %v allocations, want 0", n)
	}
}
