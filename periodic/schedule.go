package periodic

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // zones resolve the same on every machine, with or without a zoneinfo database

	"github.com/robfig/cron/v3"

	"github.com/onceq/onceq"
)

// Limits of a schedule.
const (
	// MaxNameLen is the longest schedule name, in bytes: a tick's task ID,
	// <name>@<tick>, must fit onceq.MaxIDLen.
	MaxNameLen = 200
	// MinEvery is the shortest interval.
	MinEvery = time.Second
	// MaxEvery is the longest interval; longer periods are calendar
	// periods, for a cron spec ("@yearly").
	MaxEvery = 366 * 24 * time.Hour
	// MaxPayloadBytes bounds a schedule's payload: each tick's task
	// carries it, and so does the schedule's record.
	MaxPayloadBytes = 256 << 10
)

// ErrInvalid is wrapped by every error of a schedule that does not
// validate: bad input, which nothing was written for.
var ErrInvalid = errors.New("invalid schedule")

// Missed says what a scheduler does with the ticks of a schedule that no
// scheduler submitted in time: ticks it comes to more than its lead time
// (see Lead) after they were due, because every scheduler was down or cut
// off from the brokers.
type Missed uint8

const (
	// CatchUp submits the missed ticks, late: at most MaxCatchUp of them,
	// the latest, and logs how many older ones it left out. The default.
	CatchUp Missed = iota
	// SkipMissed drops the missed ticks: the schedule goes on with the
	// ticks still to come.
	SkipMissed
)

// String returns "catch-up" or "skip", as ParseMissed reads them.
func (m Missed) String() string {
	switch m {
	case CatchUp:
		return "catch-up"
	case SkipMissed:
		return "skip"
	}
	return fmt.Sprintf("Missed(%d)", uint8(m))
}

// ParseMissed reads "catch-up" or "skip".
func ParseMissed(s string) (Missed, error) {
	switch s {
	case "catch-up":
		return CatchUp, nil
	case "skip":
		return SkipMissed, nil
	}
	return 0, fmt.Errorf("periodic: missed-ticks policy %q: want catch-up or skip: %w", s, ErrInvalid)
}

// A Schedule submits a task to Queue at each of its ticks: every Every
// (aligned on the unix epoch: an hourly interval fires on the hour, UTC)
// or at the times Cron names in zone TZ.
//
// A tick's task has the ID TaskID(Name, tick), "<name>@<tick>" with the
// tick in RFC 3339, UTC, whole seconds ("nightly@2025-03-30T01:00:00Z"),
// and is due at the tick: it never runs before it. The ID is an
// idempotency key, so every scheduler may submit every tick and workers
// run it once.
type Schedule struct {
	// Name identifies the schedule: 1 to MaxNameLen letters, digits,
	// '.', '_' or '-'. Adding a schedule of a name that exists replaces it.
	Name string
	// Queue is where the ticks' tasks go; it must exist.
	Queue string
	// Every is a fixed interval: a whole number of seconds from MinEvery
	// to MaxEvery. Ticks fall on its multiples since the unix epoch, so
	// every scheduler computes the same ones. Set Every or Cron.
	Every time.Duration
	// Cron is a standard 5-field spec (minute hour day-of-month month
	// day-of-week, as robfig/cron's standard parser reads them) or a
	// descriptor such as @daily. Set Every or Cron.
	//
	// In a zone with daylight saving time, a spec with a fixed hour fires
	// once on each day it matches: a time the clock skips fires when the
	// clock resumes (02:30 on a spring-forward night, at 03:00), a time the
	// clock passes twice fires at its first pass. A spec whose hour field
	// has a '*' ("*/15 * * * *", @hourly) follows real time instead: it
	// does not fire in the skipped hour and fires in both passes of a
	// repeated one, as Vixie cron does.
	Cron string
	// TZ is the IANA zone Cron is evaluated in, such as Europe/Paris.
	// Empty: UTC. Only with Cron.
	TZ string
	// Payload is each tick's payload, at most MaxPayloadBytes.
	Payload []byte
	// MaxAttempts bounds each tick's runs. Zero: the worker's default.
	MaxAttempts int
	// Timeout is each tick's time-to-run, whole milliseconds. Zero: the
	// worker's default.
	Timeout time.Duration
	// Missed is the missed-ticks policy. Default CatchUp.
	Missed Missed
	// Since is where the schedule's ticks begin: the first is the first
	// after it. Zero in Store.Add: now, or, when a schedule of this name
	// with the same Every, Cron and TZ exists, its Since (so that adding a
	// schedule again neither drops nor repeats ticks). A past Since makes
	// the schedule's first scheduler catch up on the ticks since then, as
	// Missed says.
	Since time.Time
}

// Validate checks every field and returns all that are wrong, each an
// *onceq.OptionError naming the field (Option is the field's name) that
// wraps ErrInvalid.
func (s Schedule) Validate() error {
	_, err := compile(s)
	return err
}

// Timing describes when the schedule ticks: "every 1m0s", or "cron 0 9 *
// * 1-5 Europe/Paris" (the zone UTC when TZ is empty).
func (s Schedule) Timing() string {
	if s.Every != 0 {
		return "every " + s.Every.String()
	}
	return "cron " + s.Cron + " " + zoneName(s.TZ)
}

// TaskID is the ID of a schedule's task for tick: "<name>@<tick>", the
// tick in RFC 3339, UTC, whole seconds.
func TaskID(name string, tick time.Time) string {
	return name + "@" + tick.UTC().Format(time.RFC3339)
}

// ParseTaskID reads a tick's task ID back into its schedule's name and the
// tick. ok is false for an ID that TaskID does not write.
func ParseTaskID(id string) (name string, tick time.Time, ok bool) {
	name, at, found := strings.Cut(id, "@")
	if !found || ValidateName(name) != nil {
		return "", time.Time{}, false
	}
	tick, err := time.Parse(time.RFC3339, at)
	if err != nil || TaskID(name, tick) != id {
		return "", time.Time{}, false
	}
	return name, tick.UTC(), true
}

// ValidateName checks a schedule name: 1 to MaxNameLen letters, digits,
// '.', '_' or '-'.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("periodic: schedule name %q: want 1 to %d letters, digits, '.', '_' or '-': %w", cut(name), MaxNameLen, ErrInvalid)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("periodic: schedule name %q: byte %d is %q: want letters, digits, '.', '_' or '-': %w", cut(name), i, c, ErrInvalid)
		}
	}
	return nil
}

func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// compiled is a valid schedule with its timing.
type compiled struct {
	Schedule
	timing timing
}

// A timing computes a schedule's ticks.
type timing interface {
	// next returns the first tick after t, or the zero time when none
	// comes (a cron spec that fires no more).
	next(t time.Time) time.Time
}

// sameTiming reports whether a and b tick at the same times.
func sameTiming(a, b Schedule) bool {
	return a.Every == b.Every && a.Cron == b.Cron && zoneName(a.TZ) == zoneName(b.TZ)
}

func zoneName(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compile validates s and builds its timing.
func compile(s Schedule) (*compiled, error) {
	errs := onceq.OptionErrors{Pkg: "periodic", Kind: ErrInvalid}
	if err := ValidateName(s.Name); err != nil {
		errs.Bad("Name", s.Name, "want 1 to %d letters, digits, '.', '_' or '-'", MaxNameLen)
	}
	if s.Queue == "" {
		errs.Missing("Queue", "name the queue the ticks' tasks go to")
	} else if err := onceq.ValidateAnyQueue(s.Queue); err != nil {
		want := err.Error()
		if oe := (*onceq.Error)(nil); errors.As(err, &oe) {
			want = oe.Kind.Error() + ": " + oe.Hint
		}
		errs.Bad("Queue", s.Queue, "%s", want)
	}
	c := &compiled{Schedule: s}
	switch {
	case s.Every == 0 && s.Cron == "":
		errs.Missing("Every", "give an interval such as 1m, or a cron spec such as \"0 9 * * 1-5\"")
	case s.Every != 0 && s.Cron != "":
		errs.Bad("Cron", s.Cron, "give an interval or a cron spec, not both")
	case s.Every != 0:
		if s.Every < MinEvery || s.Every > MaxEvery || s.Every%time.Second != 0 {
			errs.Bad("Every", s.Every, "want a whole number of seconds from %v to %d days; calendar periods are cron specs such as @monthly",
				MinEvery, MaxEvery/(24*time.Hour))
		}
		if s.TZ != "" {
			errs.Bad("TZ", s.TZ, "a time zone applies to a cron spec only: an interval's ticks are multiples of it since the unix epoch")
		}
		c.timing = every(s.Every)
	default:
		t, err := parseCron(s.Cron, s.TZ)
		var ze zoneError
		switch {
		case errors.As(err, &ze):
			errs.Bad("TZ", s.TZ, "%s", ze.want)
		case err != nil:
			errs.Bad("Cron", s.Cron, "%v", err)
		default:
			c.timing = t
		}
	}
	if len(s.Payload) > MaxPayloadBytes {
		errs.Missing("Payload", fmt.Sprintf("%d bytes: at most %d", len(s.Payload), MaxPayloadBytes))
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > onceq.MaxAttemptCount {
		errs.Bad("MaxAttempts", s.MaxAttempts, "want 0 (the worker's default) or 1 to %d", onceq.MaxAttemptCount)
	}
	if s.Timeout < 0 || s.Timeout%time.Millisecond != 0 {
		errs.Bad("Timeout", s.Timeout, "want 0 (the worker's default) or a positive whole number of milliseconds")
	}
	if s.Missed != CatchUp && s.Missed != SkipMissed {
		errs.Bad("Missed", s.Missed, "want CatchUp or SkipMissed")
	}
	if !s.Since.IsZero() && (s.Since.UnixMilli() < 0 || s.Since.UnixMilli() > onceq.MaxUnixMilli) {
		errs.Bad("Since", s.Since.UTC().Format(time.RFC3339), "want a time from 1970 to the end of 9999, or zero for now")
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if c.next(time.Now()).IsZero() {
		errs.Bad("Cron", s.Cron, "it never fires (within five years from now)")
		return nil, errs.Err()
	}
	return c, nil
}

// next returns the schedule's first tick after t, or zero.
func (c *compiled) next(t time.Time) time.Time {
	n := c.timing.next(t)
	if !n.IsZero() && n.UnixMilli() > onceq.MaxUnixMilli {
		return time.Time{}
	}
	return n
}

// span is what between finds of a schedule's ticks in an interval.
type span struct {
	n           int         // how many ticks
	first, last time.Time   // the first and the last of them
	latest      []time.Time // the latest ones, in order: at most keep
	dropped     time.Time   // the last tick before latest, when there is one
}

// between returns the ticks in (after, until], keeping the latest keep.
func (c *compiled) between(after, until time.Time, keep int) span {
	var sp span
	if e, ok := c.timing.(every); ok {
		// Arithmetic: an interval of a second down for a year has 31M ticks.
		d := time.Duration(e)
		if sp.first = e.next(after); sp.first.After(until) {
			return span{}
		}
		sp.last = e.next(until.Add(-d)) // the one multiple in (until-d, until]
		sp.n = int(sp.last.Sub(sp.first)/d) + 1
		kept := min(keep, sp.n)
		for i := sp.n - kept; i < sp.n; i++ {
			sp.latest = append(sp.latest, sp.first.Add(time.Duration(i)*d))
		}
		if kept < sp.n {
			sp.dropped = sp.first.Add(time.Duration(sp.n-kept-1) * d)
		}
		return sp
	}
	ring := make([]time.Time, 0, keep)
	for t := c.next(after); !t.IsZero() && !t.After(until); t = c.next(t) {
		if sp.n == 0 {
			sp.first = t
		}
		sp.n++
		sp.last = t
		switch {
		case keep == 0:
			sp.dropped = t
		case len(ring) < keep:
			ring = append(ring, t)
		default:
			slot := (sp.n - 1) % keep // the oldest kept tick's
			sp.dropped, ring[slot] = ring[slot], t
		}
	}
	if sp.n <= keep {
		sp.latest = ring
		return sp
	}
	if keep > 0 {
		start := sp.n % keep // the oldest kept tick
		sp.latest = append(ring[start:], ring[:start]...)
	}
	return sp
}

// every is an interval's timing: the multiples of it since the unix
// epoch.
type every time.Duration

func (e every) next(t time.Time) time.Time {
	d := time.Duration(e).Milliseconds()
	ms := t.UnixMilli()
	k := ms / d
	if ms%d < 0 {
		k--
	}
	return time.UnixMilli((k + 1) * d).UTC()
}

// cronTiming is a cron spec's timing in a zone. A spec with a fixed hour
// walks the zone's wall clock and maps each wall time to the instant it
// names (see Schedule.Cron); one whose hour has a star walks real time.
type cronTiming struct {
	spec     *cron.SpecSchedule // Location: the zone (real time) or UTC (wall clock)
	zone     *time.Location
	realTime bool
}

// starBit is robfig/cron's mark of a field that had a '*'.
const starBit = 1 << 63

type zoneError struct{ want string }

func (e zoneError) Error() string { return e.want }

func parseCron(spec, tz string) (*cronTiming, error) {
	zone := time.UTC
	switch tz {
	case "", "UTC":
	case "Local":
		return nil, zoneError{"Local is each machine's own zone, so schedulers would disagree: name the zone, such as Europe/Paris"}
	default:
		z, err := time.LoadLocation(tz)
		if err != nil {
			return nil, zoneError{"want an IANA time zone name such as Europe/Paris, America/New_York or UTC"}
		}
		zone = z
	}
	trimmed := strings.TrimSpace(spec)
	switch {
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		return nil, errors.New("give the time zone as the schedule's zone (--tz), not in the spec")
	case strings.HasPrefix(trimmed, "@every"):
		return nil, errors.New("@every counts from each scheduler's start, so schedulers would disagree: give the interval as Every (--every)")
	}
	s, err := cronParser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("want 5 fields (minute hour day-of-month month day-of-week) such as \"0 9 * * 1-5\", or @hourly, @daily, @weekly, @monthly, @yearly: %v", err)
	}
	ss, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("not a calendar spec (%T)", s)
	}
	t := &cronTiming{spec: ss, zone: zone, realTime: ss.Hour&starBit != 0}
	ss.Location = time.UTC
	if t.realTime {
		ss.Location = zone
	}
	return t, nil
}

func (c *cronTiming) next(t time.Time) time.Time {
	if c.realTime {
		return c.spec.Next(t).UTC()
	}
	w := wall(t.In(c.zone))
	for {
		w = c.spec.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if at := instant(w, c.zone); at.After(t) {
			return at
		}
	}
}

// wall is the wall-clock time of t as a time in UTC: a clock without
// daylight saving time.
func wall(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

// instant is the instant wall-clock time w names in zone: its first pass
// when the clock passes it twice, and the end of the gap when the clock
// skips it.
func instant(w time.Time, zone *time.Location) time.Time {
	var found, latest time.Time
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := w.Add(probe).In(zone).Zone() // offsets in force around w
		at := w.Add(-time.Duration(off) * time.Second)
		if wall(at.In(zone)).Equal(w) && (found.IsZero() || at.Before(found)) {
			found = at
		}
		if at.After(latest) {
			latest = at
		}
	}
	if !found.IsZero() {
		return found.UTC()
	}
	start, _ := latest.In(zone).ZoneBounds() // the gap ends where this offset began
	return start.UTC()
}
