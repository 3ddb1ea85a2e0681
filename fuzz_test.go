package onceq

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// parseFuzzHeaders turns "k=v" lines into record headers.
func parseFuzzHeaders(s string) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return hs
}

// FuzzFromRecord decodes arbitrary headers: it never panics, and whatever it
// accepts survives encode and decode unchanged: decode(encode(t)) == t.
func FuzzFromRecord(f *testing.F) {
	f.Add("q", []byte("k"), []byte("v"), "onceq-id=a\nonceq-due=1700000000000\nonceq-attempt=2\ntrace=x")
	f.Add("onceq-delay-5s", []byte(nil), []byte(nil), "onceq-queue=emails\nonceq-timeout=1500\nonceq-max-attempts=3")
	f.Add("fn", []byte("k"), []byte("v"), "onceq-id=a\nonceq-queue=fn/resize")
	f.Add("q", []byte(""), []byte("p"), "onceq-expires=0\nonceq-enqueued=1\nonceq-error=boom\nonceq-x=y")
	f.Add("q", []byte("k"), []byte("p"), "onceq-failed=5\nonceq-backoff=1000:2:60000\nonceq-requeued=0/9")
	f.Add("q", []byte("k"), []byte("p"), "onceq-id=0195f0e2-7c4a-7000-8000-000000000000\nonceq-id-generated=1")
	f.Add("q", []byte("k"), []byte("p"), "onceq-id-generated=1")
	f.Add("q", []byte("k"), []byte("p"), "onceq-id=w/0\nonceq-workflow={\"w\":\"w\"}\nonceq-input=\nonceq-cancel=dependency a ended dead")
	f.Fuzz(func(t *testing.T, topic string, key, value []byte, headers string) {
		if ValidateTopic(topic) != nil {
			return // records come from topics with valid names
		}
		r := &kgo.Record{Topic: topic, Key: key, Value: value, Headers: parseFuzzHeaders(headers), Partition: 1, Offset: 7}
		task, err := FromRecord(r)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error is not an *Error: %T %v", err, err)
			}
			return
		}
		if k, idem := DedupKeyOf(r); k != task.DedupKey() || idem != task.IdempotencyKey() {
			t.Fatalf("DedupKeyOf %q %v, DedupKey %q, IdempotencyKey %v", k, idem, task.DedupKey(), task.IdempotencyKey())
		}
		again, err := FromRecord(task.Record(topic))
		if err != nil {
			t.Fatalf("re-decoding an encoded task: %v\ntask %+v", err, task)
		}
		if !equalTasks(task, again) {
			t.Fatalf("decode(encode(t)) != t\n got %+v\nwant %+v", again, task)
		}
	})
}

// FuzzRoundTrip builds tasks from fuzzed fields, out-of-range ones
// included (times before 1970 or after 9999, attempt counts past 2^31-1,
// sub-millisecond timeouts, onceq- headers): every task Validate accepts
// is written, resolved as a producer resolves it, as a record the decoder
// accepts and reads back unchanged. Validate and FromRecord share their
// limits, so a producer never writes what a worker dead-letters as
// malformed.
func FuzzRoundTrip(f *testing.F) {
	f.Add("id-1", "emails", []byte("k"), []byte("p"), int64(1_800_000_000_000), int64(0), int64(0), int64(3), int64(2), int64(1500_000_000), "err", "h", []byte("v"), "")
	f.Add("x", "fn/resize", []byte(nil), []byte(nil), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), "", "", []byte(nil), "")
	f.Add("x", "q", []byte(nil), []byte(nil), int64(0), int64(5), int64(0), int64(0), int64(0), int64(0), "", "", []byte(nil), "")
	f.Add("x", "q", []byte(nil), []byte(nil), int64(-1), int64(0), int64(0), int64(1<<31), int64(0), int64(0), "", "", []byte(nil), "")   // before 1970; max attempts 2^31
	f.Add("x", "q", []byte(nil), []byte(nil), int64(0), int64(0), int64(-5), int64(0), int64(1<<31), int64(500), "", "", []byte(nil), "") // enqueued before 1970; attempt 2^31; 500ns
	f.Add("x", "q", []byte(nil), []byte(nil), int64(MaxUnixMilli+1), int64(0), int64(0), int64(0), int64(0), int64(0), "", "onceq-delay", []byte("5s"), "0/1")
	f.Fuzz(func(t *testing.T, id, queue string, key, payload []byte, due, expires, enqueued, maxAttempts, attempt, timeout int64, lastErr, hk string, hv []byte, requeued string) {
		task := Task{ID: id, Queue: queue, Key: key, Payload: payload, MaxAttempts: int(maxAttempts), Attempt: int(attempt),
			LastError: lastErr, Timeout: time.Duration(timeout), Requeued: requeued, GeneratedID: len(id)%2 == 1,
			Priority: int(maxAttempts%12) - 1} // -12 to 10: out of range on both sides too
		ms := func(v int64) time.Time {
			if v == 0 {
				return time.Time{}
			}
			return time.UnixMilli(v)
		}
		task.Due, task.Expires, task.Enqueued = ms(due), ms(expires), ms(enqueued)
		if hk != "" {
			task.Headers = []Header{{Key: hk, Value: hv}}
		}
		if task.Validate(0) != nil || task.ID == "" {
			return
		}
		task.Resolve(time.UnixMilli(1_800_000_000_000))
		task.LastError = CutError(task.LastError) // as the encoder writes it
		got, err := FromRecord(task.Record("onceq-delay-1s"))
		if err != nil {
			t.Fatalf("a task Validate accepts does not decode: %v\ntask %+v", err, task)
		}
		if !equalTasks(task, got) {
			t.Fatalf("decode(encode(t)) != t\n got %+v\nwant %+v", got, task)
		}
	})
}
