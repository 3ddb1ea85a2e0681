package onceq

import (
	"errors"
	"time"
)

// Spec is a task as people write it: the fields of onceq produce's flags
// and of a JSON line of tasks (ParseLine), which the HTTP API takes too.
// Durations and times are still text, so that every front end reports a
// bad value the same way, with Task.
type Spec struct {
	Queue, ID, Key string
	Payload        []byte
	// Delay (a Go duration such as 90s, from now) or At (an RFC 3339
	// time) is when the task is due; neither: now.
	Delay, At string
	// TTL (a Go duration) is how long after submission the task may
	// still start; empty: forever.
	TTL string
	// Timeout (a Go duration, whole milliseconds) is the time-to-run of
	// one attempt; empty: the worker's default.
	Timeout string
	// MaxAttempts bounds the runs; zero: the worker's default.
	MaxAttempts int
	// Priority is the task's priority, 0 (the default) to MaxPriority.
	Priority int
	Headers  []Header
}

// Task checks the spec and builds its task at now (the submission time,
// from which Delay and TTL count). The task has passed Validate with the
// default record size limit.
//
// Errors are *Error values. Their Field, and the names in their hints, are
// the spec's fields as a JSON line spells them ("queue", "id", "key",
// "delay", "at", "ttl", "timeout", "max_attempts", "priority", "header",
// "payload"), passed through name when it is not nil: the CLI passes a
// function that turns "max_attempts" into "--max-attempts", so that the
// message names the flag to fix.
func (s *Spec) Task(now time.Time, name func(field string) string) (Task, error) {
	if name == nil {
		name = func(f string) string { return f }
	}
	t := Task{Queue: s.Queue, ID: s.ID, Payload: s.Payload, Headers: s.Headers, MaxAttempts: s.MaxAttempts, Priority: s.Priority}
	if s.Key != "" {
		t.Key = []byte(s.Key)
	}
	var err error
	if t.Delay, err = specDuration(name("delay"), s.Delay); err != nil {
		return Task{}, err
	}
	if s.At != "" {
		if s.Delay != "" {
			return Task{}, invalid(ErrInvalidTask, name("delay"), s.Delay, "give %s or %s, not both: a delay from now or a due time", name("delay"), name("at"))
		}
		if t.Due, err = time.Parse(time.RFC3339Nano, s.At); err != nil {
			return Task{}, invalid(ErrInvalidTask, name("at"), s.At, "want an RFC 3339 time such as 2030-01-02T15:04:05Z or 2030-01-02T15:04:05+01:00")
		}
	}
	ttl, err := specDuration(name("ttl"), s.TTL)
	if err != nil {
		return Task{}, err
	}
	if ttl < 0 {
		return Task{}, invalid(ErrInvalidTask, name("ttl"), s.TTL, "want a positive duration: the task does not start later than this after submission")
	}
	if ttl > 0 {
		t.Expires = now.Add(ttl)
	}
	if t.Timeout, err = specDuration(name("timeout"), s.Timeout); err != nil {
		return Task{}, err
	}
	if err := t.Validate(0); err != nil {
		return Task{}, s.rename(err, name)
	}
	return t, nil
}

// rename turns a Validate error about a task field into one about the
// spec's field it came from.
func (s *Spec) rename(err error, name func(string) string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	out := *e
	switch e.Field {
	case "due":
		out.Field, out.Value = name("at"), s.At
	case "expires":
		out.Field, out.Value = name("ttl"), s.TTL
	case "header":
		out.Field = name("header")
		if e.Kind == ErrMalformedHeader && headerBit(e.Value) != 0 {
			out.Hint = "the header is onceq's own: " + specFieldOf(e.Value, name)
		}
	default:
		out.Field = name(e.Field)
	}
	return &out
}

// specFieldOf says which spec field sets a header of the wire format.
func specFieldOf(header string, name func(string) string) string {
	switch header {
	case HeaderID:
		return "set " + name("id") + " instead"
	case HeaderQueue:
		return "set " + name("queue") + " instead"
	case HeaderDue:
		return "set " + name("delay") + " or " + name("at") + " instead"
	case HeaderExpires:
		return "set " + name("ttl") + " instead"
	case HeaderMaxAttempts:
		return "set " + name("max_attempts") + " instead"
	case HeaderTimeout:
		return "set " + name("timeout") + " instead"
	}
	return "onceq writes it; it cannot be set on submission"
}

// specDuration reads a Go duration; empty is zero.
func specDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid(ErrInvalidTask, field, s, "want a duration such as 500ms, 90s or 1h30m")
	}
	return d, nil
}
