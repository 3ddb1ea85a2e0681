package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/workflow"
)

// numbered is a task and the input line it came from; the workflow it
// starts, for a workflow line.
type numbered struct {
	line int
	task onceq.Task
	flow *workflow.Node
}

func (f *produceFlags) runFile(ctx context.Context, g *globals, opts []producer.Opt, out *receipts) error {
	in := g.stdin
	if f.file != "-" {
		fh, err := os.Open(f.file)
		if err != nil {
			return usagef("--file: %v", err)
		}
		defer fh.Close()
		in = fh
	}
	lines := newLineReader(in, f.queue)
	stop := progress(g.stderr, out)
	defer stop()
	if f.tx {
		// Every line is read and checked before anything is sent.
		var tasks []numbered
		var flows []workflow.Node
		for {
			n, ok, err := lines.next()
			if err != nil {
				return fmt.Errorf("%w: nothing of the file was submitted", err)
			}
			if !ok {
				break
			}
			tasks = append(tasks, n)
			if n.flow != nil {
				flows = append(flows, *n.flow)
			}
		}
		if err := workflow.CheckCycles(flows...); err != nil {
			return fmt.Errorf("%w: nothing of the file was submitted", err)
		}
		if f.rate > 0 {
			// The transaction must outlive the paced submission.
			need := time.Duration(float64(len(tasks))/f.rate*float64(time.Second)) + producer.DefaultTxTimeout
			opts = append(opts, producer.TxTimeout(need))
		}
		// Known workflows are said so, and left out of the transaction.
		known := knownFlows{g: g}
		defer known.close()
		var fresh []numbered
		var says []string
		for _, n := range tasks {
			say, err := known.check(ctx, n)
			if err != nil {
				return fmt.Errorf("%w: nothing of the file was submitted", atLine(n.line, err))
			}
			if say != "" {
				says = append(says, n.task.ID+" "+say)
				continue
			}
			fresh = append(fresh, n)
		}
		p, err := producer.New(opts...)
		if err != nil {
			return err
		}
		defer p.Close()
		if len(fresh) > 0 {
			if err := f.submitTx(ctx, p, fresh, out); err != nil {
				return err
			}
		}
		for _, say := range says {
			fmt.Fprintln(out.w, say)
		}
		return nil
	}
	p, err := producer.New(opts...)
	if err != nil {
		return err
	}
	defer p.Close()
	pace := pacer{rate: f.rate, start: time.Now()}
	known := knownFlows{g: g}
	defer known.close()
	seq := 0
	for out.failed() == nil {
		n, ok, err := lines.next()
		if err != nil {
			out.fail(err)
			break
		}
		if !ok {
			break
		}
		if say, err := known.check(ctx, n); err != nil {
			out.fail(atLine(n.line, err))
			break
		} else if say != "" {
			out.known(seq, n.task.ID, say)
			seq++
			continue
		}
		if err := pace.wait(ctx, seq); err != nil {
			out.fail(err)
			break
		}
		i := seq
		p.SubmitAsync(ctx, n.task, func(rc producer.Receipt, err error) { out.done(i, n.line, rc, err) })
		seq++
	}
	if err := p.Flush(ctx); err != nil && out.failed() == nil {
		out.fail(err)
	}
	return out.err()
}

// submitTx submits tasks in one transaction.
func (f *produceFlags) submitTx(ctx context.Context, p *producer.Producer, tasks []numbered, out *receipts) error {
	pace := pacer{rate: f.rate, start: time.Now()}
	var rcs []producer.Receipt
	err := p.Tx(ctx, func(tx *producer.Tx) error {
		for i, n := range tasks {
			if err := pace.wait(ctx, i); err != nil {
				return err
			}
			if err := tx.Submit(n.task); err != nil {
				return atLine(n.line, err)
			}
			out.progressed.Add(1)
		}
		var err error
		rcs, err = tx.Receipts(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: the transaction was aborted, nothing of it was submitted", err)
	}
	out.progressed.Store(0)
	for i, rc := range rcs {
		out.done(i, tasks[i].line, rc, nil)
	}
	return nil
}

// pacer spaces submissions to a rate per second; zero is no limit.
type pacer struct {
	rate  float64
	start time.Time
}

func (p pacer) wait(ctx context.Context, i int) error {
	if p.rate <= 0 {
		return ctx.Err()
	}
	d := time.Until(p.start.Add(time.Duration(float64(i) / p.rate * float64(time.Second))))
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lineReader reads the tasks of a JSON lines input, skipping blank lines.
type lineReader struct {
	sc    *bufio.Scanner
	queue string
	n     int
}

func newLineReader(r io.Reader, queue string) *lineReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	return &lineReader{sc: sc, queue: queue}
}

// next returns the next task; ok is false at the end of the input.
func (l *lineReader) next() (n numbered, ok bool, err error) {
	for l.sc.Scan() {
		l.n++
		line := l.sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		task, flow, err := decodeLine(line, l.queue, time.Now())
		if err != nil {
			return n, false, &lineError{l.n, err}
		}
		return numbered{l.n, task, flow}, true, nil
	}
	if err := l.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return n, false, &lineError{l.n + 1, usageError{errLineTooLong}}
		}
		return n, false, fmt.Errorf("reading the input: %w", err)
	}
	return n, false, nil
}

// knownFlows tells which workflow lines name a workflow already known:
// submitting one again would start nothing, so the line says so instead,
// with its state ("known, in state failed: ...", and the way on). It
// opens an inspector at the first workflow line.
type knownFlows struct {
	g  *globals
	in *inspect.Inspector
}

// check returns what a known workflow line found, or "" for a line to
// submit.
func (k *knownFlows) check(ctx context.Context, n numbered) (string, error) {
	if n.flow == nil {
		return "", nil
	}
	if k.in == nil {
		in, err := openInspector(k.g)
		if err != nil {
			return "", err
		}
		k.in = in
	}
	st, err := workflow.Get(ctx, k.in, n.task.ID)
	switch {
	case errors.Is(err, inspect.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	}
	return workflow.Submission{ID: n.task.ID, Status: st}.Known(), nil
}

func (k *knownFlows) close() {
	if k.in != nil {
		k.in.Close()
	}
}
