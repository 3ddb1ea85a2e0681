package handlers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onceq/onceq/consumer"
)

// stderrTail is how much of a failed command's stderr (or a failed HTTP
// answer's body) its error carries.
const stderrTail = 512

func execHandler(command string) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		input, cleanup, err := inputFiles(t)
		if err != nil {
			return err
		}
		defer cleanup()
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Stdin = bytes.NewReader(t.Payload)
		cmd.Env = append(os.Environ(), "ONCEQ_TASK_ID="+t.ID, "ONCEQ_QUEUE="+t.Queue, "ONCEQ_ATTEMPT="+strconv.Itoa(t.Attempt))
		cmd.Env = append(cmd.Env, input...)
		var stderr tailBuffer
		cmd.Stderr = &stderr
		stdout := capBuffer{max: maxOutput}
		cmd.Stdout = &stdout
		// Kill the whole process group on timeout, not only sh.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		err = cmd.Run()
		if err == nil {
			return setResult(t, "exec: stdout of "+strconv.Quote(command), stdout)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("exec: %q: %w", command, ctx.Err())
		}
		return fmt.Errorf("exec: %q: %v: %s", command, err, strings.TrimSpace(stderr.String()))
	})
}

// maxOutput bounds the stdout or answer body a handler keeps as its
// result: more than any worker's MaxResultBytes allows.
const maxOutput = 1 << 20

// setResult makes a command's stdout or an answer's body the task's
// result; an empty one sets none. One over the worker's limit fails the
// task for good: running it again would give the same.
func setResult(t *consumer.Task, what string, out capBuffer) error {
	if out.n == 0 {
		return nil
	}
	if out.n > len(out.b) {
		return consumer.SkipRetry(fmt.Errorf("%s: %w: over %d bytes", what, consumer.ErrResultTooLarge, maxOutput))
	}
	if err := t.SetResult(out.b); err != nil {
		return consumer.SkipRetry(fmt.Errorf("%s: %w", what, err))
	}
	return nil
}

// capBuffer keeps the first max bytes written to it and counts them all.
type capBuffer struct {
	b   []byte
	n   int
	max int
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.n += len(p)
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
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

// httpIdleConns bounds the idle connections the http: handler keeps to its
// target: a worker of up to this many handlers in flight reuses its
// connections, rather than dialing anew for most tasks (net/http keeps 2
// by default, and a dial costs more than the request).
const httpIdleConns = 1024

// httpTransport is the http: handler's transport: net/http's default one,
// with httpIdleConns idle connections to the target.
func httpTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = httpIdleConns, httpIdleConns
	return tr
}

func httpHandler(target string, client *http.Client) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		started := time.Now()
		out, ctype := t.Payload, "application/octet-stream"
		if t.Input != nil {
			out, ctype = envelope(t), StepContentType
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(out))
		if err != nil {
			return consumer.SkipRetry(err)
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Onceq-Id", t.ID)
		req.Header.Set("Onceq-Queue", t.Queue)
		req.Header.Set("Onceq-Attempt", strconv.Itoa(t.Attempt))
		req.Header.Set(StartedHTTPHeader, strconv.FormatInt(started.UnixMilli(), 10))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("http: POST %s: %w", target, err)
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			body := capBuffer{max: maxOutput}
			_, err := io.Copy(&body, resp.Body)
			resp.Body.Close()
			if err != nil {
				return fmt.Errorf("http: POST %s: reading the answer: %w", target, err)
			}
			return setResult(t, "http: POST "+target+": answer body", body)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, stderrTail))
		resp.Body.Close()
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
