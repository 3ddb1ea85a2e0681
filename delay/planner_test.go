package delay

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/onceq/onceq/broker"
)

// TestPlanner runs testdata/planner. Commands:
//
//	ladder 1s 5s 30s        sets the ladder (prints it or the error)
//	next now=T due=T        the next hop at now
//	route now=T due=T       where a producer writes the record
//	hops now=T due=T        the bucket hops, each taking exactly its bucket
//	move at=T bucket=D due=T  when a record appended at T moves on
//	release at=T bucket=D due=T  when the delay service releases it (ReleaseAt)
//	readahead bucket=D      how far ahead the service reads the bucket
//	duewithin bucket=D within=D  the estimated fraction due within D
//
// Times are RFC 3339, or +D / -D relative to now (default
// 2030-01-01T00:00:00Z). Regenerate the expected output with
// go test ./delay -rewrite.
func TestPlanner(t *testing.T) {
	p := DefaultPlanner()
	datadriven.RunTest(t, "testdata/planner", func(t *testing.T, d *datadriven.TestData) string {
		now := parseTime(t, d, "now", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), time.Time{})
		switch d.Cmd {
		case "ladder":
			var names []string
			for _, a := range d.CmdArgs {
				names = append(names, a.Key)
			}
			np, err := ParseLadder(strings.Join(names, " "))
			if err != nil {
				return "error: " + err.Error()
			}
			p = np
			return FormatLadder(p.Buckets()) + "\n" + strings.Join(p.Topics(), " ")
		case "next":
			return p.Next(now, parseTime(t, d, "due", time.Time{}, now)).String()
		case "route":
			return p.Route(now, parseTime(t, d, "due", time.Time{}, now)).String()
		case "hops":
			return walk(p, now, parseTime(t, d, "due", time.Time{}, now))
		case "move":
			var bucket string
			d.ScanArgs(t, "bucket", &bucket)
			b, err := broker.ParseBucket(bucket)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			at := parseTime(t, d, "at", now, now)
			due := parseTime(t, d, "due", time.Time{}, now)
			return "+" + MoveAt(at, b, due).Sub(now).String()
		case "release":
			at := parseTime(t, d, "at", now, now)
			due := parseTime(t, d, "due", time.Time{}, now)
			rel := ReleaseAt(at, scanBucket(t, d, "bucket"), p.Smallest(), due).Sub(now)
			if rel < 0 {
				return rel.String()
			}
			return "+" + rel.String()
		case "readahead":
			return p.ReadAhead(scanBucket(t, d, "bucket")).String()
		case "duewithin":
			within := time.Duration(0)
			if w := scanString(t, d, "within"); w != "0s" {
				within = scanBucket(t, d, "within")
			}
			return fmt.Sprintf("%.4f", p.DueWithin(scanBucket(t, d, "bucket"), within))
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func scanString(t *testing.T, d *datadriven.TestData, key string) string {
	t.Helper()
	var s string
	d.ScanArgs(t, key, &s)
	return s
}

func scanBucket(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	t.Helper()
	b, err := broker.ParseBucket(scanString(t, d, key))
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return b
}

// walk follows Next from start to due, each bucket hop taking exactly its
// bucket, and prints the runs of equal hops, the final step and the count,
// checking that it agrees with Hops.
func walk(p *Planner, start, due time.Time) string {
	var (
		now   = start
		b     strings.Builder
		last  time.Duration
		run   int
		total int
	)
	flush := func() {
		if run > 0 {
			fmt.Fprintf(&b, "%s x%d\n", broker.FormatBucket(last), run)
		}
	}
	for {
		h := p.Next(now, due)
		if h.Kind != ToBucket {
			flush()
			fmt.Fprintf(&b, "then %s\n", h)
			break
		}
		if h.Bucket != last {
			flush()
			last, run = h.Bucket, 0
		}
		run++
		total++
		now = now.Add(h.Bucket)
	}
	fmt.Fprintf(&b, "hops=%d", total)
	if n := p.Hops(start, due); n != total {
		fmt.Fprintf(&b, " (but Hops says %d)", n)
	}
	return b.String()
}

// parseTime reads argument key: RFC 3339, or +D / -D relative to rel. A
// missing argument is def, or fails the test when def is zero.
func parseTime(t *testing.T, d *datadriven.TestData, key string, def, rel time.Time) time.Time {
	t.Helper()
	a, ok := d.Arg(key)
	if !ok {
		if def.IsZero() {
			d.Fatalf(t, "missing %s=", key)
		}
		return def
	}
	s := a.SingleVal(t)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		dur, err := time.ParseDuration(s)
		if err != nil {
			d.Fatalf(t, "%s=%s: %v", key, s, err)
		}
		return rel.Add(dur)
	}
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return tm
}

func TestNewPlannerErrors(t *testing.T) {
	for _, tc := range []struct {
		buckets []time.Duration
		want    string
	}{
		{nil, "no buckets"},
		{[]time.Duration{time.Second, 0}, "bucket 0s: want a positive duration"},
		{[]time.Duration{-time.Second}, "bucket -1s: want a positive duration"},
		{[]time.Duration{1500 * time.Microsecond}, "bucket 1.5ms: want whole milliseconds, such as 2ms"},
		{[]time.Duration{time.Second, 5 * time.Second, time.Second}, "bucket 1s appears twice"},
	} {
		_, err := NewPlanner(tc.buckets)
		if err == nil || !errors.Is(err, ErrLadder) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "delay: ") {
			t.Errorf("NewPlanner(%v) = %v, want an ErrLadder containing %q", tc.buckets, err, tc.want)
		}
	}
}

// TestParseLadderErrors pins issue 17's "--buckets 1000000d": the days
// overflowed into a negative duration, shown in the message. A bucket
// longer than MaxBucket is refused naming the limit, however long.
func TestParseLadderErrors(t *testing.T) {
	for _, tc := range []struct{ ladder, want string }{
		{"1000000d", `bucket "1000000d": at most 365d`},
		{"106752d", `bucket "106752d": at most 365d`}, // the first count of days past time.Duration
		{"99999999999999999999999d", "at most 365d"},
		{"366d", "at most 365d"},
		{"8761h", "at most 365d"},
		{"9999999999999999999h", "at most 365d"},
		{"0d", `bucket "0d": want a positive whole number of milliseconds`},
		{"-1d", `bucket "-1d": want a positive`},
		{"1.5ms", `bucket "1.5ms": want a positive whole number of milliseconds`},
		{"soon", `bucket "soon": want a positive`},
		{"1s,1s", "bucket 1s appears twice"},
		{"", "no buckets"},
	} {
		_, err := ParseLadder(tc.ladder)
		if !errors.Is(err, ErrLadder) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "-") && !strings.Contains(tc.ladder, "-") {
			t.Errorf("ParseLadder(%q) = %v, want an ErrLadder containing %q", tc.ladder, err, tc.want)
		}
	}
	if _, err := NewPlanner([]time.Duration{MaxBucket + time.Millisecond}); !errors.Is(err, ErrLadder) || !strings.Contains(err.Error(), "at most 365d") {
		t.Errorf("NewPlanner past MaxBucket: %v", err)
	}
	if p, err := ParseLadder("1s 365d"); err != nil || p.Buckets()[1] != MaxBucket {
		t.Errorf("ParseLadder(\"1s 365d\"): %v, %v", p, err)
	}
}

func TestPlannerDoesNotAliasLadder(t *testing.T) {
	in := []time.Duration{5 * time.Second, time.Second}
	p, err := NewPlanner(in)
	if err != nil {
		t.Fatal(err)
	}
	if in[0] != 5*time.Second {
		t.Fatalf("NewPlanner sorted its argument: %v", in)
	}
	bs := p.Buckets()
	bs[0] = time.Hour
	if p.Smallest() != time.Second {
		t.Fatalf("Buckets returned the planner's own slice")
	}
	if b, ok := p.Bucket(broker.DelayTopic(5 * time.Second)); !ok || b != 5*time.Second {
		t.Fatalf("Bucket(onceq-delay-5s) = %v %v", b, ok)
	}
	if _, ok := p.Bucket("onceq-delay-7s"); ok {
		t.Fatal("Bucket found a topic that is not on the ladder")
	}
}

// TestNeverEarly checks, for many (now, due) pairs, that following the
// planner never reaches the queue before due and that every bucket hop
// fits in the remaining delay.
func TestNeverEarly(t *testing.T) {
	p := DefaultPlanner()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for r := -time.Second; r < 3*24*time.Hour; r = r*3/2 + 7*time.Millisecond {
		now, due := start, start.Add(r)
		for hops := 0; ; hops++ {
			h := p.Next(now, due)
			if h.Kind == ToQueue {
				if now.Before(due) {
					t.Fatalf("delay %v: published at %v, before due %v", r, now, due)
				}
				break
			}
			if h.Kind == ToTimer {
				now = now.Add(h.Wait)
				continue
			}
			if h.Bucket > due.Sub(now) {
				t.Fatalf("delay %v: bucket %v is longer than the remaining %v", r, h.Bucket, due.Sub(now))
			}
			now = now.Add(h.Bucket)
			if hops > 100 {
				t.Fatalf("delay %v: more than 100 hops", r)
			}
		}
	}
}

// FuzzParseLadder: parsing never panics; an accepted ladder has positive,
// whole-millisecond buckets of at most MaxBucket, and FormatLadder writes
// it back as a ladder that parses to the same buckets.
func FuzzParseLadder(f *testing.F) {
	for _, s := range []string{"1s 5s 30s 2m 10m 1h 6h 1d", "100ms,500ms,2s", "1000000d", "365d", "1h30m", "0.5s", "9223372036854775807ns", "1d 24h", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseLadder(s)
		if err != nil {
			if !errors.Is(err, ErrLadder) {
				t.Fatalf("error %v does not wrap ErrLadder", err)
			}
			return
		}
		for _, b := range p.Buckets() {
			if b <= 0 || b > MaxBucket || b%time.Millisecond != 0 {
				t.Fatalf("ParseLadder(%q) accepted bucket %v", s, b)
			}
		}
		again, err := ParseLadder(FormatLadder(p.Buckets()))
		if err != nil || !slices.Equal(again.Buckets(), p.Buckets()) {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}
