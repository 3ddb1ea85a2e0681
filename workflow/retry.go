package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/control"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/flow"
	"github.com/onceq/onceq/producer"
)

// Submission tells what SubmitUnique did with a workflow.
type Submission struct {
	ID string
	// New is true when the ID was unknown and the workflow was submitted
	// now. Otherwise nothing was written, and Status is the known
	// workflow's.
	New    bool
	Status Status
}

// Known says what a submission of a known ID found, and the way on for a
// failed workflow: "known, in state failed: ...; ...".
func (s Submission) Known() string {
	say := "known, in state " + string(s.Status.State)
	if s.Status.Reason != "" {
		say += ": " + s.Status.Reason
	}
	if s.Status.State == StateFailed {
		say += "; " + retryWay(&s.Status)
	}
	return say
}

// SubmitUnique submits workflow n as Submit does if its ID is unknown to
// the view of ctl's inspector, and otherwise writes nothing and answers the
// known workflow's status: a second submission of an ID never starts it
// again, and SubmitUnique says so (Submission.Known), with the way to run
// a failed one again.
func SubmitUnique(ctx context.Context, ctl *control.Controller, p *producer.Producer, id string, n Node) (Submission, error) {
	task, err := Prepare(id, n, p.MaxMessageBytes())
	if err != nil {
		return Submission{}, err
	}
	for _, q := range Queues(n) {
		if err := p.CheckQueue(ctx, q); err != nil {
			return Submission{}, fmt.Errorf("workflow %s: %w", task.ID, err)
		}
	}
	subs, err := ctl.SubmitUnique(ctx, p, task)
	if err != nil {
		return Submission{}, fmt.Errorf("workflow %s: %w", task.ID, err)
	}
	s := Submission{ID: task.ID, New: subs[0].New}
	if !s.New {
		if s.Status, err = Get(ctx, ctl.Inspector(), task.ID); err != nil {
			return s, err
		}
	}
	return s, nil
}

// ErrNotRetryable is wrapped by Retry's refusals: the error says the way.
var ErrNotRetryable = errors.New("cannot be retried")

// Retry runs a failed workflow again under its ID, when it failed before
// it started (a queue that did not exist, a dependency that failed): its
// start task is requeued from its dead letter, with the definition it was
// submitted with, and the workflow service checks it again. A workflow
// that started and failed at a step is refused (ErrNotRetryable): its
// steps ran under their IDs, and an ID runs once, so it must be submitted
// again under a new ID; so is a workflow that did not fail. It returns
// the status as of before the retry.
func Retry(ctx context.Context, in *inspect.Inspector, p *producer.Producer, conn broker.Conn, id string, opts ...RetryOpt) (Status, error) {
	var cfg retryConfig
	for _, o := range opts {
		o(&cfg)
	}
	st, err := Get(ctx, in, id)
	if err != nil {
		return st, err
	}
	if !st.Retryable() {
		return st, fmt.Errorf("workflow %s: %w: it is %s: %s", id, ErrNotRetryable, st.State, retryWay(&st))
	}
	r, err := dlq.NewReader(conn)
	if err != nil {
		return st, err
	}
	defer r.Close()
	var letters []dlq.Letter
	if err := r.Read(ctx, onceq.WorkflowQueue, func(l dlq.Letter) error {
		if l.Task.ID == id {
			letters = append(letters, l)
		}
		return nil
	}); err != nil {
		return st, err
	}
	rs, problems := dlq.Choose(onceq.WorkflowQueue, letters, []string{id}, true, time.Now())
	if len(problems) > 0 {
		return st, fmt.Errorf("workflow %s: %w: its start task's dead letter: %w", id, ErrNotRetryable, problems[0])
	}
	if cfg.check != nil {
		m, err := flow.DecodeMessage(rs[0].Task.Payload)
		if err != nil || m.Start == nil {
			return st, fmt.Errorf("workflow %s: %w: its start task's dead letter holds no workflow: %v", id, ErrNotRetryable, err)
		}
		if err := cfg.check(queuesOf(&m.Start.Root, nil)); err != nil {
			return st, err
		}
	}
	err = p.Tx(ctx, func(tx *producer.Tx) error { return tx.SubmitPending(rs[0].Task) })
	if err != nil {
		return st, fmt.Errorf("workflow %s: retrying: %w", id, err)
	}
	return st, nil
}

// RetryOpt is an option of Retry.
type RetryOpt func(*retryConfig)

type retryConfig struct {
	check func(queues []string) error
}

// RetryIf retries a workflow only if check, given the queues of its
// steps as it was submitted, returns nil; its error is Retry's. A server
// checks with it that a token's namespace holds them all: the status of
// a workflow that did not start does not name them. Default: no check.
func RetryIf(check func(queues []string) error) RetryOpt {
	return func(c *retryConfig) { c.check = check }
}

// Retryable reports whether Retry runs the workflow again: it failed
// before it started, and was not canceled.
func (st *Status) Retryable() bool {
	return st.State == StateFailed && st.Root == nil && st.Start != nil && st.Start.State != onceq.StateCanceled
}

// retryWay says how a workflow in st runs again, if it can.
func retryWay(st *Status) string {
	switch {
	case st.State != StateFailed:
		return "only a failed workflow is retried"
	case st.Retryable():
		return "it did not start: once its cause is fixed, retry it with onceq workflow retry " + st.ID
	}
	return "its steps ran under their IDs, which run once: submit it again under a new ID"
}
