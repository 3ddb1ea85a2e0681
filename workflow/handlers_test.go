package workflow_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/workflow"
)

// TestInputsReachExecAndHTTP: a workflow step's input reaches the built-in
// exec: and http: handlers: a chord of 1,000 members whose callback is a
// shell command reads each member's result from ONCEQ_RESULTS_DIR, one
// served over HTTP gets them in the JSON envelope, and a chain's second
// step, a shell command, reads the first one's output from
// ONCEQ_INPUT_FILE.
func TestInputsReachExecAndHTTP(t *testing.T) {
	const n = 1000
	var got struct {
		sync.Mutex
		ctype string
		env   struct {
			ID      string   `json:"id"`
			Payload []byte   `json:"payload"`
			Input   []byte   `json:"input"`
			Results [][]byte `json:"results"`
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Lock()
		defer got.Unlock()
		got.ctype = r.Header.Get("Content-Type")
		if err := json.Unmarshal(b, &got.env); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d results, first %s, last %s", len(got.env.Results), got.env.Results[0], got.env.Results[len(got.env.Results)-1])
	}))
	defer srv.Close()
	mux := consumer.NewMux()
	mux.Route("steps", appender(&sync.Map{}))
	for queue, spec := range map[string]string{
		"sh":   `exec:printf '%s results, first %s, last %s; input %s bytes; payload %s' "$ONCEQ_RESULTS" "$(cat "$ONCEQ_RESULTS_DIR"/00000)" "$(cat "$ONCEQ_RESULTS_DIR"/00999)" "$(wc -c < "$ONCEQ_INPUT_FILE" | tr -d ' ')" "$(cat)"`,
		"next": `exec:printf 'got %s, results dir "%s"' "$(cat "$ONCEQ_INPUT_FILE")" "$ONCEQ_RESULTS_DIR"`,
		"hook": "http:" + srv.URL,
	} {
		h, _, err := handlers.Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		mux.Route(queue, h)
	}
	e := run(t, mux, "steps", "sh", "next", "hook")
	members := make([]workflow.Node, n)
	for i := range members {
		members[i] = task("steps", fmt.Sprint("r", i))
	}
	viaShell := e.submit(t, "via-shell", workflow.Chord(workflow.Group(members...), task("sh", "cb")))
	viaHTTP := e.submit(t, "via-http", workflow.Chord(workflow.Group(members[:3]...), task("hook", "cb")))
	chain := e.submit(t, "chain", workflow.Chain(task("steps", "first"), task("next", "x")))

	st := e.wait(t, viaShell)
	input, _ := json.Marshal(func() [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = fmt.Append(nil, "r", i)
		}
		return out
	}())
	if want := fmt.Sprintf("1000 results, first r0, last r999; input %d bytes; payload cb", len(input)); st.State != workflow.StateSucceeded || string(st.Output) != want {
		t.Fatalf("the shell callback: %s %q %q, want %q", st.State, st.Reason, st.Output, want)
	}
	st = e.wait(t, viaHTTP)
	if want := "3 results, first r0, last r2"; st.State != workflow.StateSucceeded || string(st.Output) != want {
		t.Fatalf("the HTTP callback: %s %q %q, want %q", st.State, st.Reason, st.Output, want)
	}
	got.Lock()
	if got.ctype != handlers.StepContentType || string(got.env.Payload) != "cb" || got.env.ID != "via-http/cb" || len(got.env.Input) == 0 {
		t.Errorf("the HTTP callback's envelope: %s %+v", got.ctype, got.env)
	}
	got.Unlock()
	st = e.wait(t, chain)
	if want := `got first, results dir ""`; st.State != workflow.StateSucceeded || string(st.Output) != want {
		t.Fatalf("the chain's shell step: %s %q %q, want %q", st.State, st.Reason, st.Output, want)
	}
}
