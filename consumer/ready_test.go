package consumer

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// TestReadyQueue: records leave the highest priority first, in arrival
// order within one; a record's priority is its onceq-priority header, 0
// without one or with a value the wire format refuses.
func TestReadyQueue(t *testing.T) {
	rec := func(prio string) *kgo.Record {
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: onceq.HeaderID, Value: []byte("x")}}}
		if prio != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: onceq.HeaderPriority, Value: []byte(prio)})
		}
		return r
	}
	for prio, want := range map[string]int8{"": 0, "0": 0, "1": 1, "9": 9, "10": 0, "x": 0, "-1": 0} {
		if got := recordPriority(rec(prio)); got != want {
			t.Errorf("onceq-priority %q: priority %d, want %d", prio, got, want)
		}
	}
	q := newReadyQueue(3000, false)
	quit := make(chan struct{})
	var in []*item
	for i := range 2500 { // past fifo's compaction threshold
		it := &item{prio: int8(i % 3 * 4)} // 0, 4, 8
		in = append(in, it)
		q.push(it, quit)
	}
	for p := range q.levels {
		want := int64(0)
		if p%4 == 0 && p <= 8 {
			want = int64(len(in)/3 + min(1, max(0, len(in)%3-p/4)))
		}
		if got := q.waiting(p); got != want {
			t.Errorf("waiting(%d) = %d, want %d", p, got, want)
		}
	}
	var out []*item
	for i := range in {
		it, left := q.pop(quit)
		if left != len(in)-i-1 {
			t.Fatalf("pop %d left %d records; want %d", i, left, len(in)-i-1)
		}
		out = append(out, it)
	}
	for i := 1; i < len(out); i++ {
		a, b := out[i-1], out[i]
		if a.prio < b.prio {
			t.Fatalf("pop %d: priority %d after %d", i, b.prio, a.prio)
		}
	}
	for p := int8(8); p >= 0; p -= 4 {
		var got, want []*item
		for _, it := range out {
			if it.prio == p {
				got = append(got, it)
			}
		}
		for _, it := range in {
			if it.prio == p {
				want = append(want, it)
			}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("priority %d: record %d out of its arrival order", p, i)
			}
		}
	}
	close(quit)
	if it, _ := q.pop(quit); it != nil {
		t.Fatal("pop of an empty queue after quit returned a record")
	}
}
