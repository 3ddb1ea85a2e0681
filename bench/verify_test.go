package bench

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

func testLoad(t testing.TB, tasks int, dups float64) *load {
	t.Helper()
	o, err := Options{Scenario: Process, Tasks: tasks, Duplicates: dups, Size: 16, Seed: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newLoad(&o, "bench-test-", rand.New(rand.NewPCG(1, 1)))
}

// output is the record a counting handler writes for task i.
func output(l *load, i int32, runs string) *kgo.Record {
	hs := []kgo.RecordHeader{{Key: onceq.HeaderID, Value: []byte(l.id(i))}}
	if runs != "" {
		hs = append(hs, kgo.RecordHeader{Key: RunsHeader, Value: []byte(runs)})
	}
	return &kgo.Record{Key: []byte(l.id(i)), Value: l.payload(time.Now()), Headers: hs}
}

// outputs is a correct exactly-once output of l: every ID once, run 1.
func outputs(l *load) []*kgo.Record {
	var recs []*kgo.Record
	for i := range l.want {
		recs = append(recs, output(l, int32(i), "1"))
	}
	return recs
}

func check(x expectation, recs []*kgo.Record) *Verification {
	c := newChecker(x, "out")
	for _, r := range recs {
		c.add(r)
	}
	return c.result()
}

// TestVerifierFails proves the verifier catches each way an exactly-once
// output can be wrong, on hand-made record sets.
func TestVerifierFails(t *testing.T) {
	l := testLoad(t, 100, 0.1)
	eos := expectation{l: l, once: true, runs: true}
	good := outputs(l)
	if v := check(eos, good); !v.OK || v.Expected != 100 || v.Unique != 100 || v.Records != 100 {
		t.Fatalf("a correct output fails: %+v", v)
	}
	for _, tc := range []struct {
		name string
		recs []*kgo.Record
		want string
		v    func(*Verification) bool
	}{
		{"one output dropped", good[1:], "1 missing", func(v *Verification) bool { return v.Missing == 1 && v.Unique == 99 }},
		{"one output twice", append(append([]*kgo.Record{}, good...), good[7]), "1 duplicates", func(v *Verification) bool { return v.Duplicates == 1 }},
		{"run counter 2", append(append([]*kgo.Record{}, good[1:]...), output(l, 0, "2")), "1 reruns", func(v *Verification) bool { return v.Reruns == 1 }},
		{"run counter missing", append(append([]*kgo.Record{}, good[1:]...), output(l, 0, "")), "1 reruns", func(v *Verification) bool { return v.Reruns == 1 }},
		{"foreign ID", append(append([]*kgo.Record{}, good...), &kgo.Record{Headers: []kgo.RecordHeader{{Key: onceq.HeaderID, Value: []byte("bench-other-1")}}}),
			"1 unexpected", func(v *Verification) bool { return v.Unexpected == 1 }},
		{"no output", nil, "100 missing", func(v *Verification) bool { return v.Missing == 100 && v.Unique == 0 }},
	} {
		v := check(eos, tc.recs)
		if v.OK || !tc.v(v) || !strings.Contains(strings.Join(v.Problems, "; "), tc.want) {
			t.Errorf("%s: %+v; want a failure with %q", tc.name, v, tc.want)
		}
	}
}

// TestVerifierAtLeastOnce: duplicates are reported, not failed; missing
// records still fail.
func TestVerifierAtLeastOnce(t *testing.T) {
	l := testLoad(t, 50, 0)
	alo := expectation{l: l, once: true, allowDups: true}
	recs := outputs(l)
	if v := check(alo, append(recs, recs[3], recs[4])); !v.OK || v.Duplicates != 2 {
		t.Fatalf("duplicates under at-least-once: %+v", v)
	}
	if v := check(alo, recs[1:]); v.OK || v.Missing != 1 {
		t.Fatalf("a missing record under at-least-once passed: %+v", v)
	}
}

// TestVerifierSubmissions: the produce scenario expects each ID as often as
// it was submitted.
func TestVerifierSubmissions(t *testing.T) {
	l := testLoad(t, 200, 0.2)
	var recs []*kgo.Record
	for _, i := range l.order {
		recs = append(recs, output(l, i, ""))
	}
	x := expectation{l: l}
	if v := check(x, recs); !v.OK || v.Expected != len(l.order) || v.Records != len(l.order) {
		t.Fatalf("%+v", v)
	}
	dup := 0
	for i, w := range l.want {
		if w == 2 {
			dup = i
			break
		}
	}
	for i, r := range recs {
		if string(r.Key) == l.id(int32(dup)) {
			recs = append(recs[:i], recs[i+1:]...)
			break
		}
	}
	if v := check(x, recs); v.OK || v.Missing != 1 || v.Unique != 200 {
		t.Fatalf("one of a duplicate's two submissions lost: %+v", v)
	}
}

// TestVerifierEarly: a record stamped before its due time fails the
// delay verification.
func TestVerifierEarly(t *testing.T) {
	l := testLoad(t, 3, 0)
	due := time.UnixMilli(1_700_000_000_000)
	var recs []*kgo.Record
	for i := range 3 {
		r := output(l, int32(i), "")
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: onceq.HeaderDue, Value: []byte(strconv.FormatInt(due.UnixMilli(), 10))})
		r.Timestamp = due.Add(time.Duration(i) * time.Millisecond)
		recs = append(recs, r)
	}
	x := expectation{l: l, due: true}
	if v := check(x, recs); !v.OK {
		t.Fatalf("on time fails: %+v", v)
	}
	recs[2].Timestamp = due.Add(-time.Millisecond)
	if v := check(x, recs); v.OK || v.Early != 1 {
		t.Fatalf("an early record passed: %+v", v)
	}
	x.visibleEarly = 2
	if v := check(x, recs[:2]); v.OK || v.Early != 2 {
		t.Fatalf("records seen early passed: %+v", v)
	}
}

func TestLoad(t *testing.T) {
	l := testLoad(t, 1000, 0.1)
	dups := len(l.order) - 1000
	if dups < 50 || dups > 150 {
		t.Fatalf("%d duplicates of 1000 at 10%%", dups)
	}
	seen := make([]int, 1000)
	for _, i := range l.order {
		seen[i]++
	}
	for i, n := range seen {
		if n != int(l.want[i]) {
			t.Fatalf("task %d submitted %d times, want %d", i, n, l.want[i])
		}
		if j, ok := l.index(l.id(int32(i))); !ok || j != i {
			t.Fatalf("index(id(%d)) = %d, %v", i, j, ok)
		}
	}
	for _, bad := range []string{"", "bench-test-", "bench-test-1000", "bench-test--1", "bench-test-01", "other-1", "bench-test-1x"} {
		if _, ok := l.index(bad); ok {
			t.Errorf("index(%q) accepted", bad)
		}
	}
	again := testLoad(t, 1000, 0.1)
	if len(again.order) != len(l.order) || again.order[17] != l.order[17] {
		t.Fatal("the same seed gave another load")
	}
	at := time.Now()
	p := l.payload(at)
	if got, ok := stamped(p); !ok || !got.Equal(time.Unix(0, at.UnixNano())) || len(p) != 16 {
		t.Fatalf("payload stamp %v, %v, %d bytes", got, ok, len(p))
	}
}

// TestRawRecordIsTheProducers: the produce scenario's baseline writes the
// records the producer writes, byte for byte, for tasks submitted once
// (generated IDs) and twice (IDs a client chose).
func TestRawRecordIsTheProducers(t *testing.T) {
	l := testLoad(t, 50, 0.5)
	now := time.UnixMilli(1_700_000_000_123)
	kinds := map[uint8]bool{}
	for i := range int32(50) {
		task := l.task(i, "q", now)
		task.Resolve(now)
		want, got := task.Record("q"), rawRecord(l, i, "q", now)
		if string(want.Key) != string(got.Key) || string(want.Value) != string(got.Value) || len(want.Headers) != len(got.Headers) {
			t.Fatalf("task %d: raw record %+v, the producer's %+v", i, got, want)
		}
		for j, h := range want.Headers {
			if g := got.Headers[j]; g.Key != h.Key || string(g.Value) != string(h.Value) {
				t.Fatalf("task %d header %d: raw %s=%q, the producer's %s=%q", i, j, g.Key, g.Value, h.Key, h.Value)
			}
		}
		kinds[l.want[i]] = true
	}
	if !kinds[1] || !kinds[2] {
		t.Fatalf("the load has tasks submitted %v times: want once and twice", kinds)
	}
}
