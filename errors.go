package onceq

import (
	"errors"
	"fmt"
)

// Kinds of invalid input. Every validation and decoding error wraps one of
// these, so callers match them with errors.Is whatever else wraps them.
var (
	ErrInvalidQueue    = errors.New("invalid queue name")
	ErrReservedQueue   = errors.New("reserved queue name")
	ErrInvalidID       = errors.New("invalid task ID")
	ErrNegativeDelay   = errors.New("negative delay")
	ErrExpiryBeforeDue = errors.New("expiry before due time")
	ErrTooLarge        = errors.New("record too large")
	ErrMalformedHeader = errors.New("malformed header")
	ErrInvalidTask     = errors.New("invalid task")
	// ErrInvalidLine is a JSON line of tasks (ParseLine) that is not one
	// JSON object of the line format.
	ErrInvalidLine = errors.New("invalid JSON line")
)

// Error is an invalid value: which field, what it was, what kind of error
// (one of the Err variables, reachable through errors.Is) and how to fix it.
type Error struct {
	Field string // "queue", "id", "header onceq-due", ...; empty: the whole input
	Value string // the offending value, cut to a readable length
	Kind  error  // one of the Err variables of this package
	Hint  string // how to fix it
}

func (e *Error) Error() string {
	msg := "onceq: " + e.Field
	if e.Value != "" {
		msg += " " + quoteCut(e.Value)
	}
	if e.Field != "" || e.Value != "" {
		msg += ": "
	}
	msg += e.Kind.Error()
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

// Unwrap returns the kind, so errors.Is(err, ErrInvalidQueue) works.
func (e *Error) Unwrap() error { return e.Kind }

func invalid(kind error, field, value, hint string, args ...any) *Error {
	if len(args) > 0 {
		hint = fmt.Sprintf(hint, args...)
	}
	return &Error{Field: field, Value: value, Kind: kind, Hint: hint}
}

// quoteCut quotes v for an error message, cutting it to 64 bytes.
func quoteCut(v string) string {
	const max = 64
	if len(v) > max {
		return fmt.Sprintf("%q...(%d bytes)", v[:max], len(v))
	}
	return fmt.Sprintf("%q", v)
}
