package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/demo"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/workflow"
)

// waitFor waits until the output and the dead letters hold at least the
// given counts, showing progress.
func (d *demoRun) waitFor(ctx context.Context, outputs, dead int, timeout time.Duration) error {
	deadline := d.started.Add(timeout)
	var lastLine time.Time
	for {
		o := d.count(d.names.Out)
		dl := d.count(broker.DLQTopic(d.names.Queue))
		line := fmt.Sprintf("  %5.1fs  done %d/%d  dead letters %d/%d", time.Since(d.started).Seconds(), min(o, len(d.plan.OK)), len(d.plan.OK), dl, len(d.plan.Dead))
		finished := o >= outputs && dl >= dead
		switch {
		case isTerminal(d.g.stderr):
			fmt.Fprintf(d.g.stderr, "\r%s ", line)
			if finished || time.Now().After(deadline) {
				fmt.Fprintln(d.g.stderr)
			}
		case finished || time.Since(lastLine) > 2*time.Second:
			fmt.Fprintln(d.g.stderr, line)
			lastLine = time.Now()
		}
		if finished {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: not all tasks ended within %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// count is how many records a topic holds for read_committed readers,
// less transaction markers (an estimate: exact counts come from report).
func (d *demoRun) count(topic string) int {
	recs, err := readAll(d.conn, topic, 10*time.Second)
	if err != nil {
		return 0
	}
	return len(recs)
}

// readAll reads every record of topic visible to a fresh read_committed
// reader.
func readAll(conn broker.Conn, topic string, timeout time.Duration) ([]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	err := broker.ReadCommitted(ctx, conn, topic, func(r *kgo.Record) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// report checks each guarantee with a fresh read_committed reader and
// prints it; it returns how many checks failed.
func (d *demoRun) report() int {
	out := d.g.stdout
	failed := 0
	show := func(c demo.Check) {
		mark := "ok  "
		if !c.OK {
			mark, failed = "FAIL", failed+1
		}
		fmt.Fprintf(out, "  %s %s\n", mark, c.Text)
	}
	fmt.Fprintln(out, "\nchecks (a fresh read_committed reader of every topic):")
	outs, err := readAll(d.conn, d.names.Out, time.Minute)
	if err != nil {
		show(demo.Check{Text: fmt.Sprintf("reading %s: %v", d.names.Out, err)})
		return failed
	}
	for _, c := range d.plan.CheckOutputs(outs) {
		show(c)
	}
	dls, err := readAll(d.conn, broker.DLQTopic(d.names.Queue), time.Minute)
	if err != nil && d.plan.Mix.Doomed > 0 {
		show(demo.Check{Text: fmt.Sprintf("reading the dead letters: %v", err)})
		return failed
	}
	show(d.plan.CheckDeadLetters(dls))
	failed += d.showLives()
	fmt.Fprintf(out, `
try next:
  onceq broker                                      # a broker of your own on 127.0.0.1:9092
  onceq topics create emails --partitions 8
  onceq produce --queue emails --id hello-1 '{"to":"you@example.com"}'
  onceq produce --queue emails --delay 30s 'later'
  onceq worker --queue emails --handler exec:'cat' --metrics-addr 127.0.0.1:9464
  curl -s 127.0.0.1:9464/metrics | grep onceq_
  onceq delay stats; onceq dlq list emails
  onceq task get emails hello-1; onceq task list emails --state dead
  echo '{"id":"wf-1","chain":[{"queue":"emails","payload":"a"},{"queue":"emails"}]}' | onceq produce --file -
  onceq workflow wait wf-1                          # the chain's steps, their states and output
  onceq periodic add heartbeat --queue emails --every 30s
  onceq demo --keep                                 # keep this demo's broker and workers running
`)
	return failed
}

// showLives prints what the task records say of one task that failed
// twice before it succeeded and of one that died, as "onceq task get"
// does, and returns how many it could not show.
func (d *demoRun) showLives() int {
	var ids []string
	if d.plan.Mix.Flaky > 0 {
		ids = append(ids, "flaky-0")
	}
	if d.plan.Mix.Doomed > 0 {
		ids = append(ids, "doomed-0")
	}
	if len(ids) == 0 && len(d.plan.Chords) == 0 {
		return 0
	}
	in, err := inspect.Open(inspect.Conn(d.conn), inspect.Logger(d.g.log))
	if err != nil {
		fmt.Fprintf(d.g.stdout, "  FAIL reading the task records: %v\n", err)
		return 1
	}
	defer in.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failed := 0
	for _, id := range ids {
		fmt.Fprintf(d.g.stdout, "\na task's life (onceq task get %s %s):\n", d.names.Queue, id)
		r, err := in.Wait(ctx, d.names.Queue, id)
		if err == nil {
			err = inspect.WriteTask(d.g.stdout, r)
		}
		if err != nil {
			fmt.Fprintf(d.g.stdout, "  FAIL %v\n", err)
			failed++
		}
	}
	if len(d.plan.Chords) > 0 {
		id := d.plan.Chords[0]
		fmt.Fprintf(d.g.stdout, "\na workflow (onceq workflow get %s):\n", id)
		st, err := workflow.Wait(ctx, in, id)
		if err == nil {
			err = workflow.WriteStatus(d.g.stdout, st)
		}
		if err != nil {
			fmt.Fprintf(d.g.stdout, "  FAIL %v\n", err)
			failed++
		}
	}
	return failed
}
