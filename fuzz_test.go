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
	f.Add("q", []byte(""), []byte("p"), "onceq-expires=0\nonceq-enqueued=1\nonceq-error=boom\nonceq-x=y")
	f.Add("q", []byte("k"), []byte("p"), "onceq-failed=5\nonceq-backoff=1000:2:60000\nonceq-requeued=0/9")
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
		if k := DedupKeyOf(r); k != task.DedupKey() {
			t.Fatalf("DedupKeyOf %q, DedupKey %q", k, task.DedupKey())
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

// FuzzRoundTrip builds tasks from fuzzed fields: every valid one survives
// encoding and decoding.
func FuzzRoundTrip(f *testing.F) {
	f.Add("id-1", "emails", []byte("k"), []byte("p"), int64(1_800_000_000_000), int64(0), 3, 2, int64(1500), "err", "h", []byte("v"))
	f.Add("x", "q", []byte(nil), []byte(nil), int64(0), int64(5), 0, 0, int64(0), "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, id, queue string, key, payload []byte, due, expires int64, maxAttempts, attempt int, timeoutMS int64, lastErr, hk string, hv []byte) {
		task := Task{ID: id, Queue: queue, Key: key, Payload: payload, MaxAttempts: maxAttempts, Attempt: attempt, LastError: CutError(lastErr)}
		if due > 0 && due < maxUnixMilli {
			task.Due = time.UnixMilli(due)
		}
		if expires > 0 && expires < maxUnixMilli {
			task.Expires = time.UnixMilli(expires)
		}
		if timeoutMS > 0 && timeoutMS < 1<<40 {
			task.Timeout = time.Duration(timeoutMS) * time.Millisecond
		}
		if hk != "" {
			task.Headers = []Header{{Key: hk, Value: hv}}
		}
		if task.Validate(0) != nil || task.ID == "" {
			return
		}
		got, err := FromRecord(task.Record("onceq-delay-1s"))
		if err != nil {
			t.Fatalf("decoding a valid task: %v\ntask %+v", err, task)
		}
		if !equalTasks(task, got) {
			t.Fatalf("decode(encode(t)) != t\n got %+v\nwant %+v", got, task)
		}
	})
}
