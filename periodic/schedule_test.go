package periodic

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/onceq/onceq"
)

// TestSchedule runs testdata/schedule: the schedule math, on a clock the
// test names. Commands:
//
//	ticks [after=T] [n=N]     the first N ticks after T of the schedule in
//	                          the input (fields as in validate), each in
//	                          the schedule's zone and as its task ID
//	plan last=T now=T [lead=D] [max=N]
//	                          what a scheduler submits and skips at now
//	validate                  the schedule in the input: ok, or the errors
//	taskid                    parses each input line as a task ID
//
// A schedule is given as lines of field=value: every, cron, tz, missed,
// name (default "s"), queue (default "q"), payload-bytes (a payload of
// that many zeros), max-attempts, timeout, since; missed=bogus sets a
// policy that does not exist. Times are RFC 3339. Regenerate the expected output with
// go test ./periodic -run TestSchedule -rewrite.
func TestSchedule(t *testing.T) {
	datadriven.RunTest(t, "testdata/schedule", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "validate":
			if err := scheduleOf(t, d).Validate(); err != nil {
				return describe(err)
			}
			return "ok"
		case "ticks":
			c := compiledOf(t, d)
			n := 5
			if a, ok := d.Arg("n"); ok {
				n, _ = strconv.Atoi(a.SingleVal(t))
			}
			zone := time.UTC
			if ct, ok := c.timing.(*cronTiming); ok {
				zone = ct.zone
			}
			var b strings.Builder
			at := timeArg(t, d, "after", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			for range n {
				if at = c.next(at); at.IsZero() {
					b.WriteString("none\n")
					break
				}
				fmt.Fprintf(&b, "%s %s\n", at.In(zone).Format(time.RFC3339), TaskID(c.Name, at))
			}
			return b.String()
		case "plan":
			c := compiledOf(t, d)
			lead, maxCatchUp := DefaultLead, DefaultMaxCatchUp
			if a, ok := d.Arg("lead"); ok {
				lead, _ = time.ParseDuration(a.SingleVal(t))
			}
			if a, ok := d.Arg("max"); ok {
				maxCatchUp, _ = strconv.Atoi(a.SingleVal(t))
			}
			p := planTicks(c, timeArg(t, d, "last", time.Time{}), timeArg(t, d, "now", time.Time{}), lead, maxCatchUp)
			var b strings.Builder
			if p.skipped > 0 {
				fmt.Fprintf(&b, "skip %d: %s to %s\n", p.skipped, rfc(p.skippedFirst), rfc(p.skippedLast))
			}
			for i, tick := range p.submit {
				late := ""
				if i < p.late {
					late = " (late)"
				}
				fmt.Fprintf(&b, "submit %s%s\n", rfc(tick), late)
			}
			fmt.Fprintf(&b, "done %s\n", rfc(p.done))
			return b.String()
		case "taskid":
			var b strings.Builder
			for _, id := range strings.Split(d.Input, "\n") {
				if name, tick, ok := ParseTaskID(id); ok {
					fmt.Fprintf(&b, "%s: %s at %s\n", id, name, rfc(tick))
				} else {
					fmt.Fprintf(&b, "%s: not a tick's ID\n", id)
				}
			}
			return b.String()
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// describe writes a schedule's errors one a line, with the option names
// they carry, so a test sees that each names its field.
func describe(err error) string {
	var b strings.Builder
	for _, oe := range onceq.Options(err) {
		if !errors.Is(oe, ErrInvalid) {
			fmt.Fprintf(&b, "NOT ErrInvalid: ")
		}
		fmt.Fprintf(&b, "%s\n", oe.Error())
	}
	if b.Len() == 0 {
		return "error without a field: " + err.Error()
	}
	return b.String()
}

func timeArg(t *testing.T, d *datadriven.TestData, key string, def time.Time) time.Time {
	t.Helper()
	a, ok := d.Arg(key)
	if !ok {
		if def.IsZero() {
			d.Fatalf(t, "missing %s=", key)
		}
		return def
	}
	tm, err := time.Parse(time.RFC3339, a.SingleVal(t))
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return tm
}

func scheduleOf(t *testing.T, d *datadriven.TestData) Schedule {
	t.Helper()
	s := Schedule{Name: "s", Queue: "q"}
	for _, line := range strings.Split(d.Input, "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			d.Fatalf(t, "line %q: want field=value", line)
		}
		var err error
		switch k {
		case "name":
			s.Name = v
		case "queue":
			s.Queue = v
		case "every":
			s.Every, err = time.ParseDuration(v)
		case "cron":
			s.Cron = v
		case "tz":
			s.TZ = v
		case "missed":
			s.Missed, err = ParseMissed(v)
			if v == "bogus" {
				s.Missed, err = 7, nil
			}
		case "payload-bytes":
			var n int
			n, err = strconv.Atoi(v)
			s.Payload = make([]byte, n)
		case "max-attempts":
			s.MaxAttempts, err = strconv.Atoi(v)
		case "timeout":
			s.Timeout, err = time.ParseDuration(v)
		case "since":
			s.Since, err = time.Parse(time.RFC3339, v)
		default:
			d.Fatalf(t, "unknown field %q", k)
		}
		if err != nil {
			d.Fatalf(t, "line %q: %v", line, err)
		}
	}
	return s
}

func compiledOf(t *testing.T, d *datadriven.TestData) *compiled {
	t.Helper()
	c, err := compile(scheduleOf(t, d))
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return c
}

// TestBetweenKeepsTheLatest: between counts every tick of an interval,
// and keeps the latest ones in order, the same for an interval (computed)
// and for a cron spec of the same ticks (walked).
func TestBetweenKeepsTheLatest(t *testing.T) {
	byEvery, err := compile(Schedule{Name: "e", Queue: "q", Every: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	byCron, err := compile(Schedule{Name: "c", Queue: "q", Cron: "* * * * *"})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	for _, until := range []time.Duration{0, 30 * time.Second, 90 * time.Second, 10 * time.Minute, 30 * time.Minute} {
		for _, keep := range []int{0, 1, 3, 7, 10, 11, 40} {
			a := byEvery.between(after, after.Add(until), keep)
			b := byCron.between(after, after.Add(until), keep)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("until +%v, keep %d: the interval's %+v, the cron spec's %+v", until, keep, a, b)
			}
			n := int((until + 30*time.Second) / time.Minute)
			if a.n != n || len(a.latest) != min(n, keep) {
				t.Fatalf("until +%v, keep %d: %d ticks, %d kept; want %d and %d", until, keep, a.n, len(a.latest), n, min(n, keep))
			}
			for i, tick := range a.latest {
				if want := after.Add(time.Duration(n-len(a.latest)+i)*time.Minute + 30*time.Second); !tick.Equal(want) {
					t.Fatalf("until +%v, keep %d: kept tick %d is %v, want %v", until, keep, i, tick, want)
				}
			}
		}
	}
}

// FuzzParseTaskID: ParseTaskID never panics, and an ID it accepts is the
// one TaskID writes for its name and tick.
func FuzzParseTaskID(f *testing.F) {
	for _, id := range []string{"nightly@2030-01-01T09:00:00Z", "a@1970-01-01T00:00:00Z", "x@2030-01-01T10:00:00+01:00", "@", "a@b@c"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		name, tick, ok := ParseTaskID(id)
		if ok && TaskID(name, tick) != id {
			t.Fatalf("ParseTaskID(%q) = %q, %v; TaskID of them is %q", id, name, tick, TaskID(name, tick))
		}
	})
}
