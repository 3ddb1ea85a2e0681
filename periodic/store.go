package periodic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/table"
	"github.com/onceq/onceq/producer"
)

// Topic is the store's topic: compacted, one partition. A schedule's
// record is keyed by its name, and removing it writes a tombstone; the
// latest tick submitted of each schedule, its cursor, is keyed
// "<name>@last".
const Topic = broker.PeriodicTopic

const cursorSuffix = "@last"

// ErrNotFound is returned by Remove for a name the store does not hold.
var ErrNotFound = errors.New("periodic: no schedule of this name: onceq periodic list shows them")

// An Entry is a schedule as the store holds it.
type Entry struct {
	Schedule
	// Last is the latest tick a scheduler submitted. Ticks are submitted
	// a little ahead (Lead), so it may come after Next. Zero: none yet.
	Last time.Time
	// Next is the schedule's first tick after the time asked. Zero: it
	// fires no more.
	Next time.Time
}

// MarshalJSON writes the entry as `onceq periodic list --json` prints it:
// name, queue, every (a Go duration) or cron and tz, payload (its text)
// or payload_base64 (when it is not UTF-8), max_attempts and timeout when
// set, missed ("catch-up" or "skip"), and since, last and next in RFC 3339
// UTC (last and next when set).
func (e Entry) MarshalJSON() ([]byte, error) {
	type entryJSON struct {
		Name          string `json:"name"`
		Queue         string `json:"queue"`
		Every         string `json:"every,omitempty"`
		Cron          string `json:"cron,omitempty"`
		TZ            string `json:"tz,omitempty"`
		Payload       string `json:"payload,omitempty"`
		PayloadBase64 []byte `json:"payload_base64,omitempty"`
		MaxAttempts   int    `json:"max_attempts,omitempty"`
		Timeout       string `json:"timeout,omitempty"`
		Missed        string `json:"missed"`
		Since         string `json:"since"`
		Last          string `json:"last,omitempty"`
		Next          string `json:"next,omitempty"`
	}
	j := entryJSON{Name: e.Name, Queue: e.Queue, Cron: e.Cron, MaxAttempts: e.MaxAttempts, Missed: e.Missed.String(),
		Since: rfc3339(e.Since), Last: rfc3339(e.Last), Next: rfc3339(e.Next)}
	if e.Every != 0 {
		j.Every = e.Every.String()
	} else {
		j.TZ = zoneName(e.TZ)
	}
	if utf8.Valid(e.Payload) {
		j.Payload = string(e.Payload)
	} else {
		j.PayloadBase64 = e.Payload
	}
	if e.Timeout != 0 {
		j.Timeout = e.Timeout.String()
	}
	return json.Marshal(j)
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Store holds the schedules in Topic. Every store reads the topic to its
// end when it opens and follows it, so a schedule added or removed
// through one is seen by all within a fetch. It is safe for concurrent
// use.
type Store struct {
	conn broker.Conn
	log  *slog.Logger
	f    *table.Follower

	mu        sync.Mutex
	schedules map[string]*compiled
	cursors   map[string]cursor
	changed   chan struct{}  // a token when something was applied
	progress  table.Progress // how far the topic was applied

	wmu sync.Mutex
	wcl *kgo.Client // writes, created by the first
}

// cursor is the latest tick submitted of a schedule's generation: the
// schedule whose Since is since. A schedule replaced with another timing
// has a new Since, so the old one's cursor does not count for it.
type cursor struct {
	since, tick time.Time
}

// Open reads the store (creating its topic if needed) and follows it. log
// receives the records it skips; nil discards them.
func Open(ctx context.Context, conn broker.Conn, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{conn: conn, log: log, schedules: map[string]*compiled{}, cursors: map[string]cursor{}, changed: make(chan struct{}, 1)}
	f, err := table.Follow(ctx, conn, Topic, log, s.apply)
	if err != nil {
		return nil, fmt.Errorf("periodic: %w", err)
	}
	s.f = f
	return s, nil
}

// Close stops following the store.
func (s *Store) Close() {
	s.f.Close()
	s.wmu.Lock()
	if s.wcl != nil {
		s.wcl.Close()
	}
	s.wmu.Unlock()
}

func (s *Store) apply(rec *kgo.Record) {
	defer s.progress.Applied(rec)
	d, err := decode(rec.Key, rec.Value)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.log.Warn("schedule record skipped", "offset", rec.Offset, "err", err)
		return
	}
	switch {
	case d.cursor && rec.Value == nil:
		delete(s.cursors, d.name)
	case d.cursor:
		if old, ok := s.cursors[d.name]; ok && old.since.Equal(d.cur.since) && old.tick.After(d.cur.tick) {
			break // schedulers race; the latest tick counts
		}
		s.cursors[d.name] = d.cur
	case rec.Value == nil:
		delete(s.schedules, d.name)
	default:
		s.schedules[d.name] = d.sched
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Add validates sch and stores it, replacing a schedule of its name, and
// returns it as stored (with Since set) once the store applied it.
// Invalid fields are refused with errors that wrap ErrInvalid and name the
// field; a queue that does not exist with producer.ErrQueueNotFound.
// Nothing is written for a refused schedule.
func (s *Store) Add(ctx context.Context, sch Schedule) (Schedule, error) {
	if err := sch.Validate(); err != nil {
		return Schedule{}, err
	}
	if err := s.queueExists(ctx, sch.Queue); err != nil {
		return Schedule{}, err
	}
	if sch.Since.IsZero() {
		sch.Since = time.Now().Truncate(time.Millisecond)
		s.mu.Lock()
		if old, ok := s.schedules[sch.Name]; ok && sameTiming(old.Schedule, sch) {
			sch.Since = old.Since
		}
		s.mu.Unlock()
	}
	sch.Since = sch.Since.Truncate(time.Millisecond)
	sch.Payload = slices.Clone(sch.Payload)
	if err := s.write(ctx, &kgo.Record{Topic: Topic, Key: []byte(sch.Name), Value: encodeSchedule(sch)}); err != nil {
		return Schedule{}, err
	}
	return sch, nil
}

func (s *Store) queueExists(ctx context.Context, queue string) error {
	adm, err := broker.NewAdmin(s.conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	topic := onceq.QueueTopic(queue) // a lane queue's lane
	if _, err := adm.DescribeTopic(ctx, topic); errors.Is(err, broker.ErrTopicNotFound) {
		return fmt.Errorf("periodic: queue %q does not exist: create it with 'onceq topics create %s': %w", queue, topic, producer.ErrQueueNotFound)
	} else if err != nil {
		return fmt.Errorf("periodic: looking up queue %q: %w", queue, err)
	}
	return nil
}

// Sync returns once the store applied every record its topic held when
// Sync was called: a Get or List after it sees every schedule added or
// removed before it, through this store or another process's, where one
// without it may miss a change made elsewhere a moment ago. Check a
// schedule with Sync before a decision that rests on it.
func (s *Store) Sync(ctx context.Context) error {
	if err := s.f.Sync(ctx); err != nil {
		return fmt.Errorf("periodic: %w", err)
	}
	return nil
}

// Remove deletes the schedule of this name and its cursor, and returns
// once the store applied it. Ticks already submitted still run.
func (s *Store) Remove(ctx context.Context, name string) error {
	s.mu.Lock()
	_, ok := s.schedules[name]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return s.write(ctx,
		&kgo.Record{Topic: Topic, Key: []byte(name)},
		&kgo.Record{Topic: Topic, Key: []byte(name + cursorSuffix)})
}

// List returns the schedules by name, with their next ticks after now.
func (s *Store) List(now time.Time) []Entry {
	s.mu.Lock()
	out := make([]Entry, 0, len(s.schedules))
	for _, c := range s.schedules {
		out = append(out, s.entry(c, now))
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Get returns the schedule of this name, with its next tick after now.
func (s *Store) Get(name string, now time.Time) (Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.schedules[name]
	if !ok {
		return Entry{}, false
	}
	return s.entry(c, now), true
}

// entry is c's Entry; s.mu is held.
func (s *Store) entry(c *compiled, now time.Time) Entry {
	e := Entry{Schedule: c.Schedule, Last: s.last(c), Next: c.next(now)}
	e.Payload = slices.Clone(e.Payload)
	return e
}

// last is the latest tick of c that a scheduler submitted, as its cursor
// says; s.mu is held.
func (s *Store) last(c *compiled) time.Time {
	if cur, ok := s.cursors[c.Name]; ok && cur.since.Equal(c.Since) {
		return cur.tick
	}
	return time.Time{}
}

// cursorBefore reports whether c's cursor is before tick, or absent:
// whether a cursor at tick would move it.
func (s *Store) cursorBefore(c *compiled, tick time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last(c).Before(tick)
}

// snapshot returns the schedules, each with the tick its scheduling
// resumes after: the latest submitted, or its Since.
func (s *Store) snapshot() map[string]resume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]resume, len(s.schedules))
	for name, c := range s.schedules {
		out[name] = resume{c: c, after: later(c.Since, s.last(c))}
	}
	return out
}

type resume struct {
	c     *compiled
	after time.Time
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// write writes records (acks=all) and waits until the store applied them.
func (s *Store) write(ctx context.Context, recs ...*kgo.Record) error {
	cl, err := s.writer()
	if err != nil {
		return err
	}
	if err := s.progress.Write(ctx, cl, recs...); err != nil {
		return fmt.Errorf("periodic: %w", err)
	}
	return nil
}

// writeCursor records that every tick of c up to tick was submitted. It
// does not wait: a cursor lost only makes a scheduler that starts later
// submit some ticks again, which run once.
func (s *Store) writeCursor(c *compiled, tick time.Time) {
	cl, err := s.writer()
	if err != nil {
		s.log.Warn("cannot write a schedule's cursor", "schedule", c.Name, "err", err)
		return
	}
	rec := &kgo.Record{Topic: Topic, Key: []byte(c.Name + cursorSuffix), Value: encodeCursor(cursor{since: c.Since, tick: tick})}
	cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
		if err != nil && !errors.Is(err, kgo.ErrClientClosed) {
			s.log.Warn("cannot write a schedule's cursor", "schedule", c.Name, "tick", tick, "err", err)
		}
	})
}

func (s *Store) writer() (*kgo.Client, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wcl == nil {
		cl, err := s.conn.NewClient(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.WithLogger(broker.KgoLogger(s.log)))
		if err != nil {
			return nil, fmt.Errorf("periodic: %w", err)
		}
		s.wcl = cl
	}
	return s.wcl, nil
}

// scheduleRecord is a schedule's record in the topic, keyed by its name.
type scheduleRecord struct {
	V           int    `json:"v"`
	Queue       string `json:"queue"`
	Every       int64  `json:"every_ms,omitempty"`
	Cron        string `json:"cron,omitempty"`
	TZ          string `json:"tz,omitempty"`
	Payload     []byte `json:"payload,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	Timeout     int64  `json:"timeout_ms,omitempty"`
	Missed      string `json:"missed"`
	Since       int64  `json:"since"`
}

// cursorRecord is a cursor's record, keyed "<name>@last": the latest tick
// submitted of the schedule whose Since is Since (unix ms both).
type cursorRecord struct {
	V     int   `json:"v"`
	Tick  int64 `json:"tick"`
	Since int64 `json:"since"`
}

func encodeSchedule(s Schedule) []byte {
	b, err := json.Marshal(scheduleRecord{V: 1, Queue: s.Queue, Every: s.Every.Milliseconds(), Cron: s.Cron, TZ: s.TZ, Payload: s.Payload,
		MaxAttempts: s.MaxAttempts, Timeout: s.Timeout.Milliseconds(), Missed: s.Missed.String(), Since: s.Since.UnixMilli()})
	if err != nil {
		panic(err) // plain fields
	}
	return b
}

func encodeCursor(c cursor) []byte {
	b, err := json.Marshal(cursorRecord{V: 1, Tick: c.tick.UnixMilli(), Since: c.since.UnixMilli()})
	if err != nil {
		panic(err)
	}
	return b
}

// decoded is a record of the topic: a schedule, or its removal (sched
// nil), or a cursor.
type decoded struct {
	name   string
	cursor bool
	sched  *compiled
	cur    cursor
}

// decode reads a record of the topic; a nil value is a removal. What it
// accepts is valid: a schedule validates, a cursor's times are in range.
func decode(key, val []byte) (decoded, error) {
	k := string(key)
	name, isCursor := strings.CutSuffix(k, cursorSuffix)
	if err := ValidateName(name); err != nil {
		return decoded{}, fmt.Errorf("periodic: key %q is neither a schedule's name nor a cursor's", cut(k))
	}
	d := decoded{name: name, cursor: isCursor}
	if val == nil {
		return d, nil
	}
	if isCursor {
		var r cursorRecord
		if err := json.Unmarshal(val, &r); err != nil {
			return decoded{}, fmt.Errorf("periodic: cursor of %s: %w", name, err)
		}
		if r.V != 1 || r.Tick < 0 || r.Tick > onceq.MaxUnixMilli || r.Since < 0 || r.Since > onceq.MaxUnixMilli {
			return decoded{}, fmt.Errorf("periodic: cursor of %s: want version 1 and times from 1970 to 9999", name)
		}
		d.cur = cursor{since: time.UnixMilli(r.Since).UTC(), tick: time.UnixMilli(r.Tick).UTC()}
		return d, nil
	}
	var r scheduleRecord
	if err := json.Unmarshal(val, &r); err != nil {
		return decoded{}, fmt.Errorf("periodic: schedule %s: %w", name, err)
	}
	missed, err := ParseMissed(r.Missed)
	if r.V != 1 || err != nil || r.Since < 0 || r.Every < 0 || r.Every > int64(MaxEvery/time.Millisecond) ||
		r.Timeout < 0 || r.Timeout > int64(1<<62/time.Millisecond) {
		return decoded{}, fmt.Errorf("periodic: schedule %s: want version 1, a missed-ticks policy and times in range", name)
	}
	c, err := compile(Schedule{Name: name, Queue: r.Queue, Every: time.Duration(r.Every) * time.Millisecond, Cron: r.Cron, TZ: r.TZ,
		Payload: r.Payload, MaxAttempts: r.MaxAttempts, Timeout: time.Duration(r.Timeout) * time.Millisecond, Missed: missed,
		Since: time.UnixMilli(r.Since).UTC()})
	if err != nil {
		return decoded{}, fmt.Errorf("periodic: schedule %s: %w", name, err)
	}
	d.sched = c
	return d, nil
}
