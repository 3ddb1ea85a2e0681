package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/consumer/consumertest"
)

// TestResults: exec: returns its command's stdout and http: its answer's
// body as the task's result; none when empty; one over the limit fails the
// task without retry and names the limit. An http: request says when the
// handler started.
func TestResults(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			fmt.Fprint(w, strings.Repeat("x", consumer.DefaultMaxResultBytes+1))
		case "/empty":
		case "/started":
			// The handler's start, a moment before the request came.
			ms, err := strconv.ParseInt(r.Header.Get(StartedHTTPHeader), 10, 64)
			if d := time.Since(time.UnixMilli(ms)); err != nil || d < 0 || d > time.Minute {
				http.Error(w, fmt.Sprintf("%s: %q", StartedHTTPHeader, r.Header.Get(StartedHTTPHeader)), http.StatusBadRequest)
				return
			}
			fmt.Fprint(w, "started")
		default:
			fmt.Fprintf(w, `{"id":%q}`, r.Header.Get("Onceq-Id"))
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		spec, want string
		tooLarge   bool
	}{
		{spec: `exec:printf 'done %s' "$ONCEQ_TASK_ID"`, want: "done t1"},
		{spec: "exec:true", want: ""},
		{spec: fmt.Sprintf("exec:head -c %d /dev/zero", consumer.DefaultMaxResultBytes+1), tooLarge: true},
		{spec: "exec:head -c 2000000 /dev/zero", tooLarge: true},
		{spec: "http:" + srv.URL + "/ok", want: `{"id":"t1"}`},
		{spec: "http:" + srv.URL + "/empty", want: ""},
		{spec: "http:" + srv.URL + "/started", want: "started"},
		{spec: "http:" + srv.URL + "/big", tooLarge: true},
	} {
		h, _, err := Parse(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		task := consumertest.NewTask(onceq.Task{ID: "t1", Queue: "q", Payload: []byte("p")}).Consumer()
		err = h.Handle(context.Background(), task)
		if tc.tooLarge {
			if !consumer.IsSkipRetry(err) || !errors.Is(err, consumer.ErrResultTooLarge) {
				t.Errorf("%s: %v; want a SkipRetry ErrResultTooLarge", tc.spec, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		if got := string(task.Result()); got != tc.want || (tc.want == "") != (task.Result() == nil) {
			t.Errorf("%s: result %q (nil %v), want %q", tc.spec, got, task.Result() == nil, tc.want)
		}
	}
}
