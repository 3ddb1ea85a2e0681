package handlers

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/onceq/onceq/consumer"
)

// A workflow step's input (consumer.Task.Input: the previous step's
// output, or a group's, the members' results) reaches the exec: and http:
// handlers as follows.
//
// exec: the command's environment names a file that holds the input as
// it is, ONCEQ_INPUT_FILE, and, when the input is a group's output (a
// chord's callback, the step after a group), a directory with each
// member's result in a file of its own, named by the member's place,
// zero-padded so that a glob lists them in order, ONCEQ_RESULTS_DIR, with
// their count in ONCEQ_RESULTS. The files are removed when the command
// ends. A task without an input sets none of these.
//
// http: a task with an input is posted as a JSON envelope of Content-Type
// StepContentType, stepEnvelope below: its payload, its input and, for a
// group's output, the members' results, each in base64. A task without an
// input is posted as before: its payload as the body.

// StepContentType is the Content-Type of the JSON envelope the http:
// handler posts for a workflow step with an input.
const StepContentType = "application/vnd.onceq.step+json"

// stepEnvelope is the body the http: handler posts for a task with an
// input.
type stepEnvelope struct {
	ID      string   `json:"id"`
	Queue   string   `json:"queue"`
	Attempt int      `json:"attempt"`
	Payload []byte   `json:"payload"`
	Input   []byte   `json:"input"`
	Results [][]byte `json:"results,omitempty"`
}

// groupResults decodes an input that is a group's output: a JSON array of
// base64 strings (package workflow's Results); ok is false for any other
// input.
func groupResults(input []byte) (results [][]byte, ok bool) {
	if len(input) == 0 || input[0] != '[' {
		return nil, false
	}
	if err := json.Unmarshal(input, &results); err != nil {
		return nil, false
	}
	return results, true
}

// envelope is the body the http: handler posts for t, with an input.
func envelope(t *consumer.Task) []byte {
	e := stepEnvelope{ID: t.ID, Queue: t.Queue, Attempt: t.Attempt, Payload: t.Payload, Input: t.Input}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	e.Results, _ = groupResults(t.Input)
	b, _ := json.Marshal(e) // strings, numbers and bytes
	return b
}

// inputFiles writes t's input for an exec: command and returns the
// environment that names it and the cleanup that removes it; a task
// without an input has none.
func inputFiles(t *consumer.Task) (env []string, cleanup func(), err error) {
	if t.Input == nil {
		return nil, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "onceq-input-")
	if err != nil {
		return nil, nil, fmt.Errorf("exec: a directory for the task's input: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	file := filepath.Join(dir, "input")
	if err := os.WriteFile(file, t.Input, 0o600); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("exec: writing the task's input: %w", err)
	}
	env = []string{"ONCEQ_INPUT_FILE=" + file}
	if results, ok := groupResults(t.Input); ok {
		rdir := filepath.Join(dir, "results")
		if err := os.Mkdir(rdir, 0o700); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("exec: writing the task's input: %w", err)
		}
		for i, r := range results {
			if err := os.WriteFile(filepath.Join(rdir, fmt.Sprintf("%05d", i)), r, 0o600); err != nil {
				cleanup()
				return nil, nil, fmt.Errorf("exec: writing the task's input: %w", err)
			}
		}
		env = append(env, "ONCEQ_RESULTS_DIR="+rdir, fmt.Sprintf("ONCEQ_RESULTS=%d", len(results)))
	}
	return env, cleanup, nil
}
