package main

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/workflow"
)

// taskFlags are the flags of onceq produce that set a task's fields, by
// the field names of onceq.Spec's errors.
var taskFlags = map[string]string{
	"queue": "--queue", "id": "--id", "key": "--key", "delay": "--delay", "at": "--at", "ttl": "--ttl",
	"timeout": "--timeout", "max_attempts": "--max-attempts", "priority": "--priority", "header": "--header",
}

// flagName names a task field by its flag, so that errors name the flag
// to fix; the payload is the argument.
func flagName(field string) string {
	if f, ok := taskFlags[field]; ok {
		return f
	}
	return field
}

// parseDuration reads a Go duration flag; empty is zero.
func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, usagef("%s %q: want a duration such as 500ms, 90s or 1h30m", field, s)
	}
	return d, nil
}

// parseHeader reads key=value.
func parseHeader(s string) (onceq.Header, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return onceq.Header{}, usagef("--header %q: want key=value, for example --header trace=abc123", s)
	}
	return onceq.Header{Key: k, Value: []byte(v)}, nil
}

// decodeLine decodes one JSON line (onceq.ParseLine) into a task at now;
// queue is the queue of lines that name none. A workflow line
// (workflow.ParseLine) is its start task, in onceq.WorkflowQueue: its
// receipt names the workflow, and the workflow comes back too.
func decodeLine(line []byte, queue string, now time.Time) (onceq.Task, *workflow.Node, error) {
	wf, ok, err := workflow.ParseLine(line, now, func(q string) (string, error) {
		if q = cmp.Or(q, queue); q == "" {
			return "", usagef("missing: give \"queue\" on the task or --queue for the whole file")
		}
		return q, nil
	})
	if ok || err != nil {
		if err != nil {
			return onceq.Task{}, nil, err
		}
		t, err := workflow.Prepare(wf.ID, wf.Node, 0)
		return t, &wf.Node, err
	}
	s, err := onceq.ParseLine(line)
	if err != nil {
		return onceq.Task{}, nil, err
	}
	if s.Queue == "" {
		s.Queue = queue
	}
	if s.Queue == "" {
		return onceq.Task{}, nil, usagef("queue: missing: give \"queue\" on the line or --queue for the whole file")
	}
	t, err := s.Task(now, nil)
	return t, nil, err
}

// lineError is a bad line: its number and what is wrong with it. It
// unwraps to the cause, so that exit codes follow it.
type lineError struct {
	n   int
	err error
}

func (e *lineError) Error() string {
	return "line " + strconv.Itoa(e.n) + ": " + strings.TrimPrefix(e.err.Error(), "onceq: ")
}

func (e *lineError) Unwrap() error { return e.err }

// atLine attributes err to an input line; line 0 is a task from flags.
func atLine(line int, err error) error {
	if line == 0 {
		return err
	}
	return &lineError{line, err}
}

// errLineTooLong is a line longer than maxLine.
var errLineTooLong = fmt.Errorf("longer than %d MiB: a task must fit in a Kafka record", maxLine>>20)

// maxLine bounds a JSON line: a 1 MiB record base64-encoded, with room
// for escapes.
const maxLine = 8 << 20
