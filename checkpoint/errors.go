package checkpoint

import (
	"errors"
	"fmt"
)

// Errors returned by the store, matched with errors.Is. The error messages
// say more: which directory, what was found and what was expected.
var (
	// ErrInUse: another process (or another Store in this process) holds the
	// directory.
	ErrInUse = errors.New("checkpoint: store in use")
	// ErrMismatch: the directory belongs to another cluster or group.
	ErrMismatch = errors.New("checkpoint: store of another cluster or group")
	// ErrCorrupt: the directory holds something that is not a readable
	// checkpoint store, or a value that does not decode.
	ErrCorrupt = errors.New("checkpoint: corrupt store")
	// ErrVersion: the store was written in a format this version of onceq
	// does not read.
	ErrVersion = errors.New("checkpoint: unknown format version")
	// ErrNotFound: ReadOnly was set and the directory holds no store.
	ErrNotFound = errors.New("checkpoint: no store")
	// ErrClosed: the Store or Batch was used after Close.
	ErrClosed = errors.New("checkpoint: closed")
	// ErrInvalid: an argument was refused (bad options, an empty ID, a key
	// too long, a malformed changelog record, a batch of a dropped partition).
	ErrInvalid = errors.New("checkpoint: invalid argument")
	// ErrFailed: Pebble hit an error it cannot recover from (a failed WAL
	// write or sync); the store refuses everything until it is reopened.
	// What it did not commit is replayed from the changelog then.
	ErrFailed = errors.New("checkpoint: store failed")
)

// kindError carries its own message, matches one of the sentinels above and
// wraps its cause (a Pebble or OS error), if any.
type kindError struct {
	msg   string
	kind  error
	cause error
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Unwrap() error        { return e.cause }
func (e *kindError) Is(target error) bool { return target == e.kind }

// errorf returns an error of the given kind whose message is "checkpoint: "
// and the formatted text. cause may be nil.
func errorf(kind, cause error, format string, args ...any) error {
	return &kindError{msg: "checkpoint: " + fmt.Sprintf(format, args...), kind: kind, cause: cause}
}

// invalidf returns an ErrInvalid error.
func invalidf(format string, args ...any) error {
	return errorf(ErrInvalid, nil, format, args...)
}

// ioError wraps an error of Pebble or the filesystem; one of this package
// (ErrFailed) is returned as it is.
func ioError(cause error, format string, args ...any) error {
	var ke *kindError
	if errors.As(cause, &ke) {
		return cause
	}
	return fmt.Errorf("checkpoint: %s: %w", fmt.Sprintf(format, args...), cause)
}
