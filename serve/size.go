package serve

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/onceq/onceq"
)

// What a request may send: a body within its limit (readBody), and a
// job's payload and attributes within MaxPayloadBytes together.

// readBody reads a request's body, at most limit bytes: past it, 413
// naming the limit (what, such as "the server's --max-bulk-bytes").
func readBody(w http.ResponseWriter, r *http.Request, limit int, what string) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, field: "body", msg: fmt.Sprintf("body too large: at most %d bytes (%s)", limit, what)}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, &apiError{status: http.StatusRequestTimeout, field: "body", msg: "the body did not arrive within the server's --body-read-timeout: send it at once"}
	}
	if err != nil {
		return nil, &apiError{status: http.StatusBadRequest, field: "body", msg: "reading the body: " + err.Error()}
	}
	return b, nil
}

// payloadLimit is what a job's payload may take: MaxPayloadBytes (max)
// less what its Job-Attr-* headers took as sent (attrs). A job's payload
// and attributes count together, so that no header carries past the
// limit what the body may not.
type payloadLimit struct{ max, attrs int }

// bytes is the payload's limit.
func (l payloadLimit) bytes() int { return l.max - l.attrs }

// String names the limit, for a 413's message.
func (l payloadLimit) String() string {
	if l.attrs == 0 {
		return "the server's --max-payload-bytes"
	}
	return fmt.Sprintf("the server's --max-payload-bytes, %d, less the %d bytes of the Job-Attr-* headers", l.max, l.attrs)
}

// check refuses attributes that take more than the whole limit: 413.
func (l payloadLimit) check() error {
	if l.attrs <= l.max {
		return nil
	}
	return &apiError{status: http.StatusRequestEntityTooLarge, field: "Job-Attr",
		msg: fmt.Sprintf("the Job-Attr-* headers take %d bytes as sent: a job's attributes and payload take at most %d bytes together (the server's --max-payload-bytes)", l.attrs, l.max)}
}

// readPayload reads a job's body, its payload, within l: past it, 413.
func readPayload(w http.ResponseWriter, r *http.Request, l payloadLimit) ([]byte, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	return readBody(w, r, l.bytes(), l.String())
}

// headerBytes is what a task's headers take: their keys and values.
func headerBytes(hs []onceq.Header) int {
	n := 0
	for _, h := range hs {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
