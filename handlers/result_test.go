package handlers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
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

// TestHTTPReusesConnections: 64 http: handlers in flight at once, for 10
// rounds, reuse their connections to the target: at most one dialed per
// handler in flight, not one per task (net/http's default transport keeps
// 2 idle, so most tasks dialed anew).
func TestHTTPReusesConnections(t *testing.T) {
	const inFlight, rounds = 64, 10
	var dialed, arrived atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := gate.Load()
		arrived.Add(1)
		<-*g // a round's requests all in flight at once
		fmt.Fprint(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	h, _, err := Parse("http:" + srv.URL + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for r := range rounds {
		g := make(chan struct{})
		gate.Store(&g)
		errs := make(chan error, inFlight)
		for i := range inFlight {
			go func() {
				task := consumertest.NewTask(onceq.Task{ID: fmt.Sprintf("t%d-%d", r, i), Queue: "q", Payload: []byte("p")}).Consumer()
				errs <- h.Handle(context.Background(), task)
			}()
		}
		for deadline := time.Now().Add(time.Minute); arrived.Load() < int64((r+1)*inFlight); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d requests arrived within a minute, want %d", r, arrived.Load(), (r+1)*inFlight)
			}
		}
		close(g)
		for range inFlight {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := dialed.Load(); n > inFlight {
		t.Fatalf("%d connections dialed for %d tasks, %d in flight at a time: want at most %d", n, inFlight*rounds, inFlight, inFlight)
	}
}
