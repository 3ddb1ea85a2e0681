package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

// Kinds documents the handler specs Parse accepts, one kind a paragraph.
const Kinds = `noop            acknowledge every task
copy:QUEUE      emit each task unchanged (same ID, key, payload, headers, and a
                workflow step's input) to QUEUE
count:QUEUE     like copy, and count each ID's runs in the partition state; the
                count travels in the output's "runs" header and the handler's
                start time (unix ms) in "started" (used to verify exactly-once:
                every count must be 1; and never early: started >= due); the
                task's result is {"runs":N,"attempt":A}
flaky:QUEUE     like count, but a task fails while its attempt is at most its
                "fail" header (a number, or "always"); "skip" fails it without
                retry, "timeout" makes its first attempt wait out its
                time-to-run: for trying out retries and dead letters.
                Both count: and flaky: first sleep for a task's "sleep" header,
                a Go duration such as 1500ms, on every run: a slow task. Its
                context ending (time-to-run, shutdown, a moved partition) ends
                the sleep and fails the run; a bad value fails it without retry.
exec:COMMAND    run COMMAND with sh -c, the payload on stdin and ONCEQ_TASK_ID,
                ONCEQ_QUEUE, ONCEQ_ATTEMPT in the environment; exit 0 succeeds
                with stdout as the task's result, anything else fails with the
                tail of stderr. A workflow step's input (the previous step's
                output) is in the file ONCEQ_INPUT_FILE; a group's output (a
                chord callback's input) also as one file per member result in
                ONCEQ_RESULTS_DIR (00000, 00001, ...), ONCEQ_RESULTS of them
http:URL        POST the payload with Onceq-Id, Onceq-Queue, Onceq-Attempt headers
                and Onceq-Started (when the handler started, unix ms);
                a workflow step with an input is posted as a JSON envelope
                (Content-Type application/vnd.onceq.step+json): id, queue,
                attempt, payload, input and, for a group's output, results,
                each in base64. 2xx succeeds with the answer's body as the task's result; 4xx
                other than 408 and 429 fails without retry; other answers are
                retried, honouring Retry-After. A result over the worker's
                --max-result-bytes fails the task without retry`

// StartedHTTPHeader carries, on an http: handler's request, when the
// handler started (unix ms): the start a queue's limit counts, which the
// request reaches its server some network time after.
const StartedHTTPHeader = "Onceq-Started"

// Headers the count: and flaky: handlers read and write.
const (
	// RunsHeader carries, on a count: or flaky: output, how many times
	// the task's ID ran in its partition (1 when it ran exactly once).
	RunsHeader = "runs"
	// StartedHeader carries, on a count: or flaky: output, when the
	// handler started (unix ms).
	StartedHeader = "started"
	// FailHeader tells a flaky: handler how many attempts of a task fail
	// (a number), or "always", "skip" (fail without retry) or "timeout"
	// (the first attempt waits out its time-to-run).
	FailHeader = "fail"
	// SleepHeader tells a count: or flaky: handler how long to sleep
	// before its work, on every run: a Go duration such as "1500ms".
	SleepHeader = "sleep"
)

// ErrSpec is matched (errors.Is) by every error of Parse: the spec is bad
// input, not a failure.
var ErrSpec = errors.New("handlers: bad handler spec")

// SpecError is the error of Parse: Spec is the spec as given and Reason
// says what is wrong with it and how to fix it.
type SpecError struct {
	Spec   string
	Reason string
}

func (e *SpecError) Error() string { return fmt.Sprintf("handler %q: %s", e.Spec, e.Reason) }

// Is reports whether target is ErrSpec.
func (e *SpecError) Is(target error) bool { return target == ErrSpec }

func specErr(spec, format string, args ...any) error {
	return &SpecError{Spec: spec, Reason: fmt.Sprintf(format, args...)}
}

// Parse builds a handler from its spec, KIND or KIND:ARG as Kinds lists.
// It also returns the queues the handler writes to, which must exist. Its
// errors are *SpecError and match ErrSpec.
func Parse(spec string) (consumer.Handler, []string, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "noop":
		if arg != "" {
			return nil, nil, specErr(spec, "noop takes no argument")
		}
		return consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil }), nil, nil
	case "copy", "count", "flaky":
		if err := onceq.ValidateQueue(arg); err != nil {
			return nil, nil, specErr(spec, "%v", err)
		}
		h := copyTo(arg, kind != "copy")
		if kind == "flaky" {
			h = flaky(h)
		}
		if kind != "copy" {
			h = sleepy(h)
		}
		return h, []string{arg}, nil
	case "exec":
		if strings.TrimSpace(arg) == "" {
			return nil, nil, specErr(spec, "give a command, for example exec:'./send-mail.sh'")
		}
		return execHandler(arg), nil, nil
	case "http":
		u, err := url.Parse(arg)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, nil, specErr(spec, "want http:URL with an http or https URL, for example http:http://127.0.0.1:8080/tasks")
		}
		return httpHandler(arg, &http.Client{Transport: httpTransport()}), nil, nil
	}
	return nil, nil, specErr(spec, "unknown kind; use one of:\n%s", Kinds)
}

// Copy emits each task unchanged to queue: the copy: handler.
func Copy(queue string) consumer.Handler { return copyTo(queue, false) }

// Count is Copy that also counts each ID's runs in the partition state
// and adds RunsHeader and StartedHeader to the output: the count: handler
// without its SleepHeader.
func Count(queue string) consumer.Handler { return copyTo(queue, true) }

func copyTo(queue string, count bool) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
		started := time.Now()
		// A workflow step's input goes with it; its place in the workflow
		// does not: the copy is no step of it.
		out := onceq.Task{ID: t.ID, Queue: queue, Key: t.Key, Payload: t.Payload, Headers: t.Headers, Input: t.Input,
			Expires: t.Expires, MaxAttempts: t.MaxAttempts, Timeout: t.Timeout, Enqueued: t.Enqueued}
		if count {
			n, err := t.State().Counter([]byte("runs/"+t.ID), 1)
			if err != nil {
				return err
			}
			out.Headers = append(append([]onceq.Header{}, t.Headers...),
				onceq.Header{Key: RunsHeader, Value: []byte(strconv.FormatInt(n, 10))},
				onceq.Header{Key: StartedHeader, Value: []byte(strconv.FormatInt(started.UnixMilli(), 10))})
			if err := t.SetResult(CountResult(n, t.Attempt)); err != nil {
				return err
			}
		}
		return t.Emit(out)
	})
}

// CountResult is the result of a count: or flaky: run: the ID's runs in
// its partition and the attempt, as JSON.
func CountResult(runs int64, attempt int) []byte {
	return []byte(`{"runs":` + strconv.FormatInt(runs, 10) + `,"attempt":` + strconv.Itoa(attempt) + `}`)
}

// flaky fails a task while its attempt is at most its FailHeader, or as
// the header's word says.
func flaky(next consumer.Handler) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		for _, h := range t.Headers {
			if h.Key != FailHeader {
				continue
			}
			switch string(h.Value) {
			case "always":
				return fmt.Errorf("flaky: task %s fails always (attempt %d)", t.ID, t.Attempt)
			case "skip":
				return consumer.SkipRetry(fmt.Errorf("flaky: task %s fails without retry", t.ID))
			case "timeout":
				if t.Attempt == 1 {
					<-ctx.Done()
					return fmt.Errorf("flaky: task %s waited out its time-to-run: %w", t.ID, ctx.Err())
				}
			}
			if n, err := strconv.Atoi(string(h.Value)); err == nil && t.Attempt <= n {
				return fmt.Errorf("flaky: task %s fails attempt %d of the first %d", t.ID, t.Attempt, n)
			}
		}
		return next.Handle(ctx, t)
	})
}

// sleepy sleeps for the task's SleepHeader before next runs, or until the
// task's context ends (its time-to-run, a revoked partition, the shutdown
// timeout), which fails the run with the context's error. A value that is
// not a duration, or a negative one, fails the task without retry.
func sleepy(next consumer.Handler) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		for _, h := range t.Headers {
			if h.Key != SleepHeader {
				continue
			}
			d, err := time.ParseDuration(string(h.Value))
			if err != nil || d < 0 {
				return consumer.SkipRetry(fmt.Errorf("task %s: header %q is %q: want a duration of 0 or more, such as 1500ms",
					t.ID, SleepHeader, h.Value))
			}
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return fmt.Errorf("task %s: sleeping %v for its %q header: %w", t.ID, d, SleepHeader, ctx.Err())
			}
			break
		}
		return next.Handle(ctx, t)
	})
}
