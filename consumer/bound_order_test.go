package consumer

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// TestQueueBoundOrder: a queue's places go to its records in the
// queue's order, whichever partition each came from and whichever came
// first: the highest priority, then the oldest. A revoked partition's
// records leave every line they wait in, of a lane's queues too.
func TestQueueBoundOrder(t *testing.T) {
	base := time.Unix(1000, 0)
	ps := []*partState{{}, {}}
	rec := func(queue string, p int32, off int64, age int, prio int8) *item {
		r := &kgo.Record{Topic: "lane", Partition: p, Offset: off, Timestamp: base.Add(time.Duration(age) * time.Millisecond),
			Headers: []kgo.RecordHeader{{Key: onceq.HeaderQueue, Value: []byte(queue)}}}
		return &item{ps: ps[p], rec: r, prio: prio}
	}
	name := func(it *item) string {
		return strconv.Itoa(int(it.rec.Partition)) + "@" + strconv.FormatInt(it.rec.Offset, 10)
	}
	b := newQueueBound(2)
	// Partition 1's records came first, but partition 0's are older; 1@9
	// has a priority.
	first := b.take([]*item{rec("lane/a", 1, 5, 30, 0), rec("lane/a", 1, 6, 40, 0), rec("lane/a", 0, 1, 10, 0), rec("lane/a", 1, 9, 90, 3)})
	var started []string
	for _, it := range first {
		started = append(started, name(it))
	}
	if want := []string{"1@9", "0@1"}; !slices.Equal(started, want) {
		t.Fatalf("started %v; want %v: the highest priority, then the oldest", started, want)
	}
	// Later records older than some in the line go before them.
	if got := b.take([]*item{rec("lane/a", 0, 2, 20, 0), rec("lane/b", 0, 3, 50, 0)}); len(got) != 1 || name(got[0]) != "0@3" {
		t.Fatalf("took %v; want lane/b's record alone: lane/a's places are taken", got)
	}
	var order []string
	for it := first[0]; ; {
		next := b.done(it)
		if next == nil {
			break
		}
		order = append(order, name(next))
		it = next
	}
	if want := []string{"0@2", "1@5", "1@6"}; !slices.Equal(order, want) {
		t.Fatalf("the line started %v; want %v", order, want)
	}

	// Partition 1 is revoked while its records wait in two queues' lines.
	b = newQueueBound(1)
	b.take([]*item{rec("lane/a", 0, 1, 1, 0), rec("lane/b", 0, 2, 2, 0)})
	b.take([]*item{rec("lane/a", 1, 3, 3, 0), rec("lane/b", 1, 4, 4, 0), rec("lane/a", 0, 5, 5, 0)})
	if n := b.drop(ps[1]); n != 2 || b.waiting.Load() != 1 {
		t.Fatalf("dropped %d, %d waiting; want 2 dropped, 1 waiting", n, b.waiting.Load())
	}
}

// TestLineOrderOneMillisecond: records of one millisecond take a queue's
// places in the order their generated IDs were submitted, whatever their
// partitions; records with client IDs (idempotency keys) tell nothing by
// their IDs and keep partition and offset order.
func TestLineOrderOneMillisecond(t *testing.T) {
	at := time.Unix(1000, 0)
	rec := func(p int32, off int64, id string, idem bool) *item {
		r := &kgo.Record{Topic: "lane", Partition: p, Offset: off, Timestamp: at,
			Headers: []kgo.RecordHeader{{Key: onceq.HeaderQueue, Value: []byte("lane/a")}}}
		return &item{ps: &partState{}, rec: r, dedupKey: "lane/a/" + id, idem: idem}
	}
	for _, tc := range []struct {
		name  string
		idem  bool
		order []string
	}{
		{"generated", false, []string{"0191-a", "0191-b", "0191-c", "0191-d"}},
		{"client", true, []string{"0191-c", "0191-a", "0191-d", "0191-b"}}, // 0@3, 0@5, 1@4, 1@7
	} {
		b := newQueueBound(1)
		got := b.take([]*item{rec(1, 7, "0191-b", tc.idem), rec(0, 3, "0191-c", tc.idem), rec(1, 4, "0191-d", tc.idem), rec(0, 5, "0191-a", tc.idem)})
		var order []string
		for it := got[0]; it != nil; it = b.done(it) {
			order = append(order, strings.TrimPrefix(it.dedupKey, "lane/a/"))
		}
		if !slices.Equal(order, tc.order) {
			t.Errorf("%s IDs: started %v; want %v", tc.name, order, tc.order)
		}
	}
}
