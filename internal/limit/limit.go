// Package limit holds the limits of queues across every worker that runs
// them: at most Count starts in any window of Per, and at most Running
// tasks running at once.
//
// The limits topic, onceq-limits (one partition, compacted, its last
// minute never compacted), holds two kinds of record:
//
//	limit/<queue>                  the queue's Limit (JSON); a tombstone lifts it
//	claim/<queue>/<holder>/<nonce>  a worker's claim to start a task of the queue
//
// A claim names when its task starts (At) and until when it may run
// (Until: its time-to-run and grace, so that a worker that dies holds its
// place no longer); its holder writes it again, Released, when the
// handler returns (Withdrawn too if the task never started, which takes
// its start out of the windows), and forgets it (a tombstone) once no window reaches
// its start. Each claim has a key of its own, so compaction never drops
// a start a window still needs: it keeps a claim's last record, which
// names its start, until the tombstone. Every worker folds the topic in offset order into a
// Book, which admits or refuses each claim where the topic has it, by the
// record's timestamp and the claims before it: a claim is admitted if
// fewer than Running claims of its queue are admitted, not released and
// not past their Until, and if no window of Per+Margin would then hold
// more than Count admitted starts. Every reader folds the same records in
// the same order, so every worker decides each claim alike and no leader
// is needed; a worker starts its task only once it read its own claim
// admitted, and not later than At+Margin, so that the starts themselves
// keep to the windows.
//
// A worker that starts reads the topic from its start, and forgets the
// claims of workers that died long ago (their Until an hour past).
package limit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// Topic is the limits topic.
const Topic = broker.LimitsTopic

// Margin widens each window of a rate: a task starts at most Margin/2
// after the time its claim named (maxLate), and the rest absorbs what
// comes between its start and its handler's first effect, so that the
// starts and their effects, not only the claims, keep to Count in any
// window of Per. A rate of 10/s therefore allows about 9.7 starts a second
// under a steady backlog.
const Margin = 30 * time.Millisecond

// Bounds of a limit.
const (
	MaxCount   = 1_000_000
	MaxRunning = 1_000_000
	MinPer     = 10 * time.Millisecond
	MaxPer     = 24 * time.Hour
)

// Limit is a queue's limit. A zero Count or Running sets no limit of that
// kind; a Limit with neither is no limit.
type Limit struct {
	// Count starts in any window of Per.
	Count int           `json:"count,omitempty"`
	Per   time.Duration `json:"-"`
	// Running is how many tasks of the queue run at once, across every
	// worker.
	Running int `json:"running,omitempty"`
}

// None reports whether l limits nothing.
func (l Limit) None() bool { return l.Count == 0 && l.Running == 0 }

// Rate is l's rate as "<count>/<per>" (10/s, 600/m, 5/250ms), "" if it
// has none.
func (l Limit) Rate() string {
	if l.Count == 0 {
		return ""
	}
	per := l.Per.String()
	switch l.Per {
	case time.Second:
		per = "s"
	case time.Minute:
		per = "m"
	case time.Hour:
		per = "h"
	}
	return strconv.Itoa(l.Count) + "/" + per
}

func (l Limit) String() string {
	var parts []string
	if l.Count > 0 {
		parts = append(parts, "rate "+l.Rate())
	}
	if l.Running > 0 {
		parts = append(parts, "running "+strconv.Itoa(l.Running))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Validate says what is wrong with l, and how to fix it.
func (l Limit) Validate() error {
	switch {
	case l.Count < 0 || l.Count > MaxCount:
		return fmt.Errorf("rate: %d starts: want 1 to %d", l.Count, MaxCount)
	case l.Count > 0 && (l.Per < MinPer || l.Per > MaxPer):
		return fmt.Errorf("rate: a window of %v: want %v to %v", l.Per, MinPer, MaxPer)
	case l.Count == 0 && l.Per != 0:
		return errors.New("rate: a window without a count of starts")
	case l.Running < 0 || l.Running > MaxRunning:
		return fmt.Errorf("running: %d: want 1 to %d tasks running at once", l.Running, MaxRunning)
	}
	return nil
}

// ParseRate reads a rate: "<count>/<unit>" with unit s, m or h, or
// "<count>/<duration>" (5/250ms, 100/10s).
func ParseRate(s string) (count int, per time.Duration, err error) {
	c, p, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want <count>/<unit>, such as 10/s, 600/m or 5/250ms", s)
	}
	count, err = strconv.Atoi(c)
	if err != nil || count < 1 || count > MaxCount {
		return 0, 0, fmt.Errorf("%q: the count %q: want a whole number from 1 to %d", s, c, MaxCount)
	}
	switch p {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		if per, err = time.ParseDuration(p); err != nil {
			return 0, 0, fmt.Errorf("%q: the window %q: want s, m, h or a duration such as 250ms", s, p)
		}
	}
	if per < MinPer || per > MaxPer {
		return 0, 0, fmt.Errorf("%q: a window of %v: want %v to %v", s, per, MinPer, MaxPer)
	}
	return count, per, nil
}

// Key prefixes of the topic.
const (
	limitPrefix = "limit/"
	claimPrefix = "claim/"
)

// LimitKey is the key of queue's limit.
func LimitKey(queue string) []byte { return []byte(limitPrefix + queue) }

// ClaimKey is the key of a holder's claim nonce on queue.
func ClaimKey(queue, holder, nonce string) []byte {
	return []byte(claimPrefix + queue + "/" + holder + "/" + nonce)
}

// limitValue is a limit record's JSON.
type limitValue struct {
	V       int   `json:"v"`
	Count   int   `json:"count,omitempty"`
	PerMS   int64 `json:"per_ms,omitempty"`
	Running int   `json:"running,omitempty"`
}

// Claim is a worker's claim to start a task.
type Claim struct {
	// Nonce names this claim among its holder's (in its key).
	Nonce string `json:"-"`
	// At is when the task starts, Until when its claim lapses (Unix
	// milliseconds).
	At    int64 `json:"at"`
	Until int64 `json:"until"`
	// Released: the task's handler returned, or the claim was given up.
	Released bool `json:"released,omitempty"`
	// Withdrawn: given up before its task started (it was read back too
	// late, or the task no longer waits): its start no longer counts in
	// the windows.
	Withdrawn bool `json:"withdrawn,omitempty"`
}

// claimValue is a claim record's JSON.
type claimValue struct {
	V int `json:"v"`
	Claim
}

// Record is a decoded record of the topic: a limit (Holder empty), or a
// claim of Holder on Queue (Claim), or its tombstone (Claim nil).
type Record struct {
	Queue  string
	Limit  Limit
	Holder string
	Nonce  string
	Claim  *Claim
}

// LimitRecord encodes queue's limit; a limit of nothing is a tombstone.
func LimitRecord(queue string, l Limit) *kgo.Record {
	rec := &kgo.Record{Topic: Topic, Key: LimitKey(queue)}
	if !l.None() {
		rec.Value, _ = json.Marshal(limitValue{V: 1, Count: l.Count, PerMS: l.Per.Milliseconds(), Running: l.Running})
	}
	return rec
}

// ClaimRecord encodes a claim of holder on queue.
func ClaimRecord(queue, holder string, c Claim) *kgo.Record {
	v, _ := json.Marshal(claimValue{V: 1, Claim: c}) // numbers and a bool
	return &kgo.Record{Topic: Topic, Key: ClaimKey(queue, holder, c.Nonce), Value: v}
}

// ForgetRecord is the tombstone of holder's claim nonce on queue.
func ForgetRecord(queue, holder, nonce string) *kgo.Record {
	return &kgo.Record{Topic: Topic, Key: ClaimKey(queue, holder, nonce)}
}

// Decode reads a record of the topic.
func Decode(key, val []byte) (Record, error) {
	k := string(key)
	switch {
	case strings.HasPrefix(k, limitPrefix):
		r := Record{Queue: k[len(limitPrefix):]}
		if err := onceq.ValidateAnyQueue(r.Queue); err != nil {
			return Record{}, fmt.Errorf("limits: key %q: %w", k, err)
		}
		if val == nil {
			return r, nil
		}
		var v limitValue
		if err := json.Unmarshal(val, &v); err != nil || v.V != 1 {
			return Record{}, fmt.Errorf("limits: %s: want a version 1 limit: %v", k, err)
		}
		r.Limit = Limit{Count: v.Count, Per: time.Duration(v.PerMS) * time.Millisecond, Running: v.Running}
		if err := r.Limit.Validate(); err != nil {
			return Record{}, fmt.Errorf("limits: %s: %w", k, err)
		}
		return r, nil
	case strings.HasPrefix(k, claimPrefix):
		rest := k[len(claimPrefix):]
		i := strings.LastIndexByte(rest, '/')
		j := -1
		if i > 0 {
			j = strings.LastIndexByte(rest[:i], '/')
		}
		if j <= 0 {
			return Record{}, fmt.Errorf("limits: key %q: want claim/<queue>/<holder>/<nonce>", k)
		}
		r := Record{Queue: rest[:j], Holder: rest[j+1 : i], Nonce: rest[i+1:]}
		if r.Holder == "" || r.Nonce == "" || onceq.ValidateAnyQueue(r.Queue) != nil {
			return Record{}, fmt.Errorf("limits: key %q: want claim/<queue>/<holder>/<nonce>", k)
		}
		if val == nil {
			return r, nil
		}
		var v claimValue
		if err := json.Unmarshal(val, &v); err != nil || v.V != 1 {
			return Record{}, fmt.Errorf("limits: %s: want a version 1 claim: %v", k, err)
		}
		if v.At <= 0 || v.Until < v.At {
			return Record{}, fmt.Errorf("limits: %s: a claim needs a start no later than its end", k)
		}
		if v.Withdrawn && !v.Released {
			return Record{}, fmt.Errorf("limits: %s: a claim withdrawn is released too", k)
		}
		v.Nonce = r.Nonce
		r.Claim = &v.Claim
		return r, nil
	}
	return Record{}, fmt.Errorf("limits: key %q: want limit/<queue> or claim/<queue>/<holder>/<nonce>", k)
}
