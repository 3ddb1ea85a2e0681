package flow

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/onceq/onceq"
)

// Ref names a task by its queue and ID.
type Ref struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
}

// String is "<queue>/<id>": queue names hold no '/'.
func (r Ref) String() string { return r.Queue + "/" + r.ID }

// Definition is a workflow as submitted: its ID, its root node, and the
// tasks that must succeed before it starts.
type Definition struct {
	W     string `json:"w"`
	Root  Node   `json:"root"`
	After []Ref  `json:"after,omitempty"`
}

// Message is the payload of a task of onceq.WorkflowQueue: a workflow to
// start, or a group member's report to its join.
type Message struct {
	Start  *Definition `json:"start,omitempty"`
	Report *Report     `json:"report,omitempty"`
}

// MaxMessageBytes bounds a message when it is decoded.
const MaxMessageBytes = onceq.DefaultMaxMessageBytes

// DecodeMessage reads the payload of a workflow queue's task, checking
// its shape.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if len(b) > MaxMessageBytes {
		return m, fmt.Errorf("workflow message of %d bytes, over %d", len(b), MaxMessageBytes)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("workflow message: %w", err)
	}
	switch {
	case (m.Start == nil) == (m.Report == nil):
		return m, errors.New("workflow message: want exactly one of start and report")
	case m.Start != nil:
		if m.Start.W == "" {
			return m, errors.New("workflow message: a workflow to start has an ID")
		}
		if err := m.Start.Root.Check(); err != nil {
			return m, fmt.Errorf("workflow message: workflow %s: %w", m.Start.W, err)
		}
		for _, r := range m.Start.After {
			if r.Queue == "" || r.ID == "" {
				return m, fmt.Errorf("workflow message: workflow %s: a dependency has a queue and an ID", m.Start.W)
			}
		}
	default:
		r := m.Report
		if r.W == "" || r.Join.ID == "" || r.Join.N < 1 || r.Join.I < 0 || r.Join.I >= r.Join.N || r.OK == (r.Fail != nil) {
			return m, errors.New("workflow message: a report names its workflow, its join and its member, and is a success or a failure")
		}
		for i := range r.Rest {
			if err := r.Rest[i].check(); err != nil {
				return m, fmt.Errorf("workflow message: report to %s: %w", r.Join.ID, err)
			}
		}
	}
	return m, nil
}

// Encode is the message as a payload.
func (m Message) Encode() ([]byte, error) { return json.Marshal(m) }
