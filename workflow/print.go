package workflow

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
)

// WriteStatus writes a workflow's status for a person: its state, why it
// failed or what it waits for, its output, and its steps as a tree, a
// task a line with its state:
//
//	workflow  report-7
//	state     failed
//	reason    step 1 (task fetch/report-7/1) dead: max_attempts: ...
//	steps
//	  chain                                    failed
//	    0  task fetch/report-7/0               succeeded
//	    1  task fetch/report-7/1               dead (attempt 3)
//	    2  task render/report-7/2              pending
func WriteStatus(w io.Writer, st Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	line("workflow", st.ID)
	line("state", string(st.State))
	line("reason", st.Reason)
	if st.State == StateSucceeded {
		line("output", inspect.FormatResult(st.Output))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if st.Root == nil {
		return nil
	}
	fmt.Fprintln(w, "steps")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	writeStep(tw, st.Root, "", "  ")
	return tw.Flush()
}

func writeStep(w io.Writer, s *Step, label, indent string) {
	name := s.Kind
	if label != "" {
		name = label + "  " + name
	}
	state := string(s.State)
	if s.Reason != "" {
		state += ": " + s.Reason
	}
	if s.Kind == "task" {
		name += " " + s.Queue + "/" + s.ID
		if r := s.Record; r != nil {
			state = string(r.State)
			if r.Attempt > 1 {
				state += fmt.Sprintf(" (attempt %d)", r.Attempt)
			}
			if r.Error != "" && r.State != "succeeded" {
				state += ": " + strings.TrimSpace(r.Error)
			}
		}
	}
	fmt.Fprintf(w, "%s%s\t%s\n", indent, name, state)
	next := indent + "  "
	for i := range s.Steps {
		writeStep(w, &s.Steps[i], fmt.Sprint(i), next)
	}
	if s.Callback != nil {
		writeStep(w, s.Callback, "callback", next)
	}
	for i := range s.OnSuccess {
		writeStep(w, &s.OnSuccess[i], "on success", next)
	}
	for i := range s.OnError {
		writeStep(w, &s.OnError[i], "on error", next)
	}
}

// WriteJSON writes a workflow's status as one JSON object: id, state,
// reason, output (base64), start (the start task's record) and root (the
// steps, each with kind, path, state, and for a task its queue, id and
// record).
func WriteJSON(w io.Writer, st Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// MarshalJSON writes the status as WriteJSON describes.
func (st Status) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID     string          `json:"id"`
		State  State           `json:"state"`
		Reason string          `json:"reason,omitempty"`
		Output []byte          `json:"output,omitempty"`
		Start  json.RawMessage `json:"start,omitempty"`
		Root   *Step           `json:"root,omitempty"`
	}{st.ID, st.State, st.Reason, st.Output, recordJSON(st.Start), st.Root})
}

// MarshalJSON writes a step with its task's record as onceq's task record
// JSON.
func (s Step) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Kind      string          `json:"kind"`
		Path      string          `json:"path"`
		State     State           `json:"state"`
		Reason    string          `json:"reason,omitempty"`
		Queue     string          `json:"queue,omitempty"`
		ID        string          `json:"id,omitempty"`
		Record    json.RawMessage `json:"record,omitempty"`
		Steps     []Step          `json:"steps,omitempty"`
		Callback  *Step           `json:"callback,omitempty"`
		OnSuccess []Step          `json:"on_success,omitempty"`
		OnError   []Step          `json:"on_error,omitempty"`
	}{s.Kind, s.Path, s.State, s.Reason, s.Queue, s.ID, recordJSON(s.Record), s.Steps, s.Callback, s.OnSuccess, s.OnError})
}

func recordJSON(r *onceq.TaskRecord) json.RawMessage {
	if r == nil {
		return nil
	}
	return r.AppendJSON(nil)
}
