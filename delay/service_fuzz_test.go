package delay

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

func TestCursorRoundTrip(t *testing.T) {
	c := cursor{Offset: 10, High: 25, Time: 1_900_000_000_123, Smallest: 1000}
	got, err := parseCursor(10, c.encode())
	if err != nil || got != c {
		t.Fatalf("parseCursor(encode(%+v)) = %+v, %v", c, got, err)
	}
	for _, tc := range []struct {
		meta string
		want string // error substring; empty: no filter, no error
	}{
		{"", ""},
		{"member-1234", ""}, // committed by another client: no filter
		{"onceq-delay/1 25 1900000000123", "three numbers"},
		{"onceq-delay/1 9 1900000000123 1000", "below the committed offset"},
		{"onceq-delay/1 25 -1 1000", "not a non-negative number"},
		{"onceq-delay/1 25 1 0", "smallest bucket is zero"},
		{"onceq-delay/2 25 1 1000", "want"},
	} {
		got, err := parseCursor(10, tc.meta)
		if tc.want == "" {
			if err != nil || got.High != 10 || got.Offset != 10 {
				t.Errorf("parseCursor(%q) = %+v, %v; want no filter", tc.meta, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || got.High != 10 {
			t.Errorf("parseCursor(%q) = %+v, %v; want an error containing %q and no filter", tc.meta, got, err, tc.want)
		}
	}
}

// FuzzParseCursor: offset metadata comes from the brokers; whatever it
// holds, parsing never panics, never filters records below the offset,
// and a valid cursor survives a round trip.
func FuzzParseCursor(f *testing.F) {
	f.Add(int64(10), "onceq-delay/1 25 1900000000123 1000")
	f.Add(int64(0), "")
	f.Add(int64(5), "onceq-delay/1  1 1")
	f.Add(int64(5), "onceq-delay/1 99999999999999999999 1 1")
	f.Fuzz(func(t *testing.T, offset int64, meta string) {
		if offset < 0 {
			return
		}
		c, err := parseCursor(offset, meta)
		if c.Offset != offset || c.High < offset {
			t.Fatalf("parseCursor(%d, %q) = %+v", offset, meta, c)
		}
		if err != nil {
			return
		}
		if c.High > offset {
			again, err := parseCursor(offset, c.encode())
			if err != nil || again != c {
				t.Fatalf("round trip of %+v: %+v, %v", c, again, err)
			}
		}
	})
}

// FuzzDueMillis: the bucket reader's onceq-due parser agrees with the wire
// format's decoder on every record the decoder accepts.
func FuzzDueMillis(f *testing.F) {
	f.Add("1900000000123", "", false)
	f.Add("0", "q", false)
	f.Add("0123", "q", false)
	f.Add("253402300800000", "q", false)
	f.Add("12a", "q", true)
	f.Fuzz(func(t *testing.T, due, other string, twice bool) {
		r := &kgo.Record{Topic: "onceq-delay-1s", Headers: []kgo.RecordHeader{{Key: onceq.HeaderQueue, Value: []byte("q")}, {Key: onceq.HeaderDue, Value: []byte(due)}}}
		if twice {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: onceq.HeaderDue, Value: []byte(other)})
		}
		got, ok := dueMillis(r)
		task, err := onceq.FromRecord(r)
		if err == nil && (!ok || got != task.Due.UnixMilli()) {
			t.Fatalf("due %q (twice %v): dueMillis = %d %v, FromRecord = %v", due, twice, got, ok, task.Due)
		}
		if ok && err != nil && !twice {
			t.Fatalf("due %q: dueMillis accepted %d, FromRecord refused: %v", due, got, err)
		}
		if ok {
			// A release is always computable and never before the append
			// time's bucket end or the due time, whichever is first.
			at := time.UnixMilli(1_900_000_000_000)
			r.Timestamp = at
			rel := releaseOf(r, time.Second, time.Second)
			if rel > at.Add(time.Second).UnixMilli() && rel != got {
				t.Fatalf("release %d after the bucket end for due %d", rel, got)
			}
		}
	})
}
