package main

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/producer"
)

// receipts prints receipt lines in input order as acknowledgments arrive,
// in any order, and counts them.
type receipts struct {
	mu         sync.Mutex
	w          *bufio.Writer
	quiet      bool
	next       int // the next sequence number to print
	pending    map[int]receiptLine
	n, delayed int
	first      error
	start      time.Time
	progressed atomic.Int64 // submitted, for the progress line
}

type receiptLine struct {
	rc producer.Receipt
	ok bool
	// known, for a workflow line whose ID is known: what was found,
	// printed instead of a receipt (nothing was submitted).
	known string
}

// known records a workflow line whose ID was known, so nothing was
// submitted: its line says so, in the state the workflow is in.
func (r *receipts) known(seq int, id, say string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(seq, receiptLine{ok: true, known: id + " " + say})
}

func (r *receipts) done(seq, line int, rc producer.Receipt, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.first == nil {
			r.first = atLine(line, err)
		}
	} else {
		r.n++
		if rc.Delayed {
			r.delayed++
		}
		r.progressed.Add(1)
	}
	r.record(seq, receiptLine{rc: rc, ok: err == nil})
}

// record keeps a line to print and prints those now in order. r.mu is
// held.
func (r *receipts) record(seq int, l receiptLine) {
	r.pending[seq] = l
	for {
		l, ok := r.pending[r.next]
		if !ok {
			break
		}
		delete(r.pending, r.next)
		r.next++
		if l.known != "" {
			fmt.Fprintln(r.w, l.known) // quiet or not: nothing was submitted
			continue
		}
		if l.ok && !r.quiet {
			fmt.Fprintf(r.w, "%s %s/%d@%d", l.rc.ID, l.rc.Topic, l.rc.Partition, l.rc.Offset)
			if l.rc.Delayed {
				r.w.WriteString(" delayed")
			}
			r.w.WriteByte('\n')
		}
	}
}

func (r *receipts) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first = err
	}
}

func (r *receipts) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// err is the run's error, if any, with how many tasks were submitted
// before the run stopped (their receipts are printed).
func (r *receipts) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		return nil
	}
	if r.n == 0 {
		return fmt.Errorf("%w (nothing was submitted)", r.first)
	}
	return fmt.Errorf("%w (%d tasks were submitted before the run stopped)", r.first, r.n)
}

func (r *receipts) summary() {
	if r.quiet {
		fmt.Fprintf(r.w, "submitted %d tasks (%d delayed) in %v\n", r.n, r.delayed, time.Since(r.start).Round(time.Millisecond))
	}
}

// progress shows a progress line on stderr while a file is submitted, if
// stderr is a terminal; stop clears it.
func progress(stderr io.Writer, r *receipts) (stop func()) {
	if !isTerminal(stderr) {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(stderr, "\r\033[K")
				return
			case <-t.C:
				n := r.progressed.Load()
				fmt.Fprintf(stderr, "\r\033[K%d tasks submitted, %.0f/s", n, float64(n)/time.Since(r.start).Seconds())
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
