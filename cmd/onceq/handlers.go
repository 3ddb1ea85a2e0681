package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

// handlerKinds documents the --handler values.
const handlerKinds = `noop            acknowledge every task
copy:QUEUE      emit each task unchanged (same ID, key, payload, headers) to QUEUE
count:QUEUE     like copy, and count each ID's runs in the partition state; the
                count travels in the output's "runs" header and the handler's
                start time (unix ms) in "started" (used to verify exactly-once:
                every count must be 1; and never early: started >= due)
flaky:QUEUE     like count, but a task fails while its attempt is at most its
                "fail" header (a number, or "always"); "skip" fails it without
                retry, "timeout" makes its first attempt wait out its
                time-to-run: for trying out retries and dead letters.
                Both count: and flaky: first sleep for a task's "sleep" header,
                a Go duration such as 1500ms, on every run: a slow task. Its
                context ending (time-to-run, shutdown, a moved partition) ends
                the sleep and fails the run; a bad value fails it without retry.
exec:COMMAND    run COMMAND with sh -c, the payload on stdin and ONCEQ_TASK_ID,
                ONCEQ_QUEUE, ONCEQ_ATTEMPT in the environment; exit 0 succeeds,
                anything else fails with the tail of stderr
http:URL        POST the payload with Onceq-Id, Onceq-Queue, Onceq-Attempt headers;
                2xx succeeds; 4xx other than 408 and 429 fails without retry;
                other answers are retried, honouring Retry-After`

// parseHandler builds a handler from its --handler spec. It also returns
// the queues the handler writes to, which must exist.
func parseHandler(spec string) (consumer.Handler, []string, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "noop":
		if arg != "" {
			return nil, nil, usagef("--handler %q: noop takes no argument", spec)
		}
		return consumer.HandlerFunc(func(context.Context, *consumer.Task) error { return nil }), nil, nil
	case "copy", "count", "flaky":
		if err := onceq.ValidateQueue(arg); err != nil {
			return nil, nil, usagef("--handler %q: %v", spec, err)
		}
		h := copyHandler(arg, kind != "copy")
		if kind == "flaky" {
			h = flaky(h)
		}
		if kind != "copy" {
			h = sleepy(h)
		}
		return h, []string{arg}, nil
	case "exec":
		if strings.TrimSpace(arg) == "" {
			return nil, nil, usagef("--handler %q: give a command, for example exec:'./send-mail.sh'", spec)
		}
		return execHandler(arg), nil, nil
	case "http":
		u, err := url.Parse(arg)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, nil, usagef("--handler %q: want http:URL with an http or https URL, for example http:http://127.0.0.1:8080/tasks", spec)
		}
		return httpHandler(arg, &http.Client{}), nil, nil
	}
	return nil, nil, usagef("--handler %q: unknown kind; use one of:\n%s", spec, handlerKinds)
}

// Headers the count: and flaky: handlers add to their outputs: the run
// count of the task's ID, and when the handler started (unix ms).
const (
	RunsHeader    = "runs"
	StartedHeader = "started"
)

func copyHandler(queue string, count bool) consumer.Handler {
	return consumer.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
		started := time.Now()
		out := onceq.Task{ID: t.ID, Queue: queue, Key: t.Key, Payload: t.Payload, Headers: t.Headers,
			Expires: t.Expires, MaxAttempts: t.MaxAttempts, Timeout: t.Timeout, Enqueued: t.Enqueued}
		if count {
			n, err := t.State().Counter([]byte("runs/"+t.ID), 1)
			if err != nil {
				return err
			}
			out.Headers = append(append([]onceq.Header{}, t.Headers...),
				onceq.Header{Key: RunsHeader, Value: []byte(strconv.FormatInt(n, 10))},
				onceq.Header{Key: StartedHeader, Value: []byte(strconv.FormatInt(started.UnixMilli(), 10))})
		}
		return t.Emit(out)
	})
}

// FailHeader tells a flaky: handler how many attempts of a task fail.
const FailHeader = "fail"

// flaky fails a task while its attempt is at most its "fail" header, or
// as the header's word says.
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

// SleepHeader tells a count: or flaky: handler how long to sleep before
// its work, on every run: a Go duration such as "1500ms".
const SleepHeader = "sleep"

// sleepy sleeps for the task's "sleep" header before next runs, or until
// the task's context ends (its time-to-run, a revoked partition, the
// shutdown timeout), which fails the run with the context's error. A value
// that is not a duration, or a negative one, fails the task without retry.
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

// stderrTail is how much of a failed command's stderr its error carries.
const stderrTail = 512

func execHandler(command string) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Stdin = bytes.NewReader(t.Payload)
		cmd.Env = append(os.Environ(), "ONCEQ_TASK_ID="+t.ID, "ONCEQ_QUEUE="+t.Queue, "ONCEQ_ATTEMPT="+strconv.Itoa(t.Attempt))
		var stderr tailBuffer
		cmd.Stderr = &stderr
		cmd.Stdout = io.Discard
		// Kill the whole process group on timeout, not only sh.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("exec: %q: %w", command, ctx.Err())
		}
		return fmt.Errorf("exec: %q: %v: %s", command, err, strings.TrimSpace(stderr.String()))
	})
}

// tailBuffer keeps the last stderrTail bytes written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > stderrTail {
		t.b = append(t.b[:0], t.b[len(t.b)-stderrTail:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

func httpHandler(target string, client *http.Client) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(t.Payload))
		if err != nil {
			return consumer.SkipRetry(err)
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Onceq-Id", t.ID)
		req.Header.Set("Onceq-Queue", t.Queue)
		req.Header.Set("Onceq-Attempt", strconv.Itoa(t.Attempt))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("http: POST %s: %w", target, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, stderrTail))
		resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return nil
		}
		err = fmt.Errorf("http: POST %s: %s: %s", target, resp.Status, strings.TrimSpace(string(body)))
		switch {
		case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
			return consumer.SkipRetry(err)
		}
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return consumer.RetryAfter(d, err)
		}
		return err
	})
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}
