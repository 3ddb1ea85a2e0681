package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Bounds of a Limit.
const (
	// MaxLimitCount bounds a Limit's Read and Write.
	MaxLimitCount = 1_000_000_000
	// MaxLimitInterval bounds a Limit's Interval, in seconds: a day.
	MaxLimitInterval = 24 * 60 * 60
)

// A Limit is a token's limit, lmstfy's throttler's: the token may make
// Read consumes and Write publishes in each Interval seconds (windows of
// Unix time / Interval). A count of 0 leaves that kind of request
// unlimited; a Limit bounds one kind at least.
type Limit struct {
	Read     int64 `json:"read"`
	Write    int64 `json:"write"`
	Interval int64 `json:"interval"`
}

// A LimitError is a Limit that Validate refuses: Field names what is
// wrong ("read", "write" or "interval"), and the message how to fix it.
type LimitError struct {
	Field string
	msg   string
}

func (e *LimitError) Error() string { return "limit: " + e.msg }

// Validate checks a limit: Read and Write 0 (unlimited) to MaxLimitCount,
// not both 0, and Interval 1 to MaxLimitInterval seconds.
func (l Limit) Validate() error {
	for _, c := range []struct {
		field string
		n     int64
		what  string
	}{{"read", l.Read, "consumes"}, {"write", l.Write, "publishes"}} {
		if c.n < 0 || c.n > MaxLimitCount {
			return &LimitError{c.field, fmt.Sprintf("%s %d: want the %s allowed in each interval, 1 to %d, or 0 to leave them unlimited", c.field, c.n, c.what, MaxLimitCount)}
		}
	}
	switch {
	case l.Read == 0 && l.Write == 0:
		return &LimitError{"read", "read and write are both 0: want read (consumes), write (publishes) or both above 0, the requests allowed in each interval; to lift the limit, delete it"}
	case l.Interval < 1 || l.Interval > MaxLimitInterval:
		return &LimitError{"interval", fmt.Sprintf("interval %d: want 1 to %d seconds", l.Interval, MaxLimitInterval)}
	}
	return nil
}

// Of is the limit of requests of kind in an interval: Read or Write, 0
// for unlimited.
func (l Limit) Of(kind UsageKind) int64 {
	if kind == UsageRead {
		return l.Read
	}
	return l.Write
}

// SetLimit sets the limit of the token of this ID (nil lifts it), and
// returns once the store applied it. It rewrites the token's record with
// all it held but the limit, so the token keeps working as it did. It
// returns an error wrapping ErrUnknownID for an ID the store does not
// hold, revoked or never created.
//
// A token revoked while its limit is set stays revoked: the store does
// not apply a rewrite of a token it saw revoked, and SetLimit then
// writes the revoke again, so that the topic's latest record of the ID
// is a tombstone once more (compaction keeps the latest alone).
func (s *Store) SetLimit(ctx context.Context, id string, l *Limit) error {
	if l != nil {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("auth: token %s: %w", id, err)
		}
		l = &Limit{Read: l.Read, Write: l.Write, Interval: l.Interval} // the caller's stays theirs
	}
	s.mu.RLock()
	e, ok := s.tokens[id]
	s.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownID, id)
	}
	e.tok.Limit, e.tok.Updated = l, time.Now()
	val, err := json.Marshal(e.stored())
	if err != nil {
		return err
	}
	if err := s.write(ctx, &kgo.Record{Topic: Topic, Key: []byte(id), Value: val}); err != nil {
		return err
	}
	if _, ok := s.Lookup(id); !ok {
		if err := s.write(ctx, &kgo.Record{Topic: Topic, Key: []byte(id)}); err != nil {
			return fmt.Errorf("auth: token %s was revoked while its limit was set; writing its revoke again: %w", id, err)
		}
		return fmt.Errorf("%w: %q was revoked while its limit was set", ErrUnknownID, id)
	}
	return nil
}
