package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/onceq/onceq/control"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/producer"
)

type produceFlags struct {
	queue, id, key        string
	delay, at, ttl        string
	timeout               string
	maxAttempts           int
	priority              int
	headers               []string
	file                  string
	tx, quiet, unique     bool
	records               bool
	rate                  float64
	createQueues          int32
	stdinPayload, isBatch bool
}

func newProduceCmd(g *globals) *cobra.Command {
	var f produceFlags
	cmd := &cobra.Command{
		Use:   "produce [PAYLOAD | -]",
		Short: "Submit tasks: one from flags, or many from a JSON lines file",
		Long: `Submit one task from flags, its payload the argument or "-" for stdin, or many
tasks from a JSON lines file (--file F, or --file - for stdin), one object per
line:

  {"queue":"emails","id":"invoice-7","key":"user-42","payload":"hi",
   "delay":"90s","ttl":"1h","max_attempts":5,"priority":7,"timeout":"30s",
   "headers":{"trace":"abc"}}

Fields: queue (default --queue), id (default: a UUIDv7), key (default: the id),
payload (a JSON string is its text, any other JSON value its compact JSON) or
payload_base64, delay or at (RFC 3339), ttl (not run later than this after
submission), max_attempts, priority (0, the default and lowest, to 9: a worker
starts the higher first), timeout, headers. Durations are Go durations such as
500ms, 90s or 1h30m. Blank lines are skipped. A line that is not one JSON object
(null, an array), an unknown field (names are lower case), a field or header given
twice, a byte order mark and text that is not UTF-8 are errors: give bytes that
are not text as payload_base64.

Each task is acknowledged by the brokers (acks=all, idempotent) and printed as
"ID TOPIC/PARTITION@OFFSET", with "delayed" when it went to a delay bucket, in
input order; --quiet prints a summary instead. A bad line stops the run with
its line number and exit code 2; the tasks before it were submitted. With --tx
the whole file is read and checked first and submitted in one transaction:
every task becomes visible to workers at once, or none.

Each task is also recorded in its queue's task records, pending or scheduled,
before it is printed: "onceq task get" shows it, "onceq queue stats" counts it
and "onceq task cancel" cancels it before any worker runs it. --records=false
leaves that out, for streams whose tasks nobody looks up.

With --unique (one task, with --id) the task is submitted only if its queue's
task records do not know the ID, with a record that shows it pending at once;
it prints "ID new TOPIC/PARTITION@OFFSET", or "ID known STATE" and submits
nothing when the ID is pending, scheduled, retrying or already final.`,
		Example: `  onceq produce --queue emails '{"to":"ada@example.com"}'
  echo hello | onceq produce --queue emails --delay 10m --header trace=abc -
  onceq produce --file tasks.jsonl --tx --queue emails
  onceq produce --file - --rate 1000 --quiet < tasks.jsonl
  onceq produce --queue reports --id report-2026-11 --unique '{"month":11}'`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(cmd, args); err != nil {
				return err
			}
			return f.run(cmd.Context(), g, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.queue, "queue", "", "queue to submit to (with --file: for lines that name none)")
	fl.StringVar(&f.id, "id", "", "task ID (default: a time-ordered UUIDv7)")
	fl.StringVar(&f.key, "key", "", "partition key (default: the task ID)")
	fl.StringVar(&f.delay, "delay", "", "run no earlier than this from now, e.g. 90s or 1h30m")
	fl.StringVar(&f.at, "at", "", "run no earlier than this RFC 3339 time, e.g. 2030-01-02T15:04:05Z")
	fl.StringVar(&f.ttl, "ttl", "", "do not run later than this after submission, e.g. 1h")
	fl.StringVar(&f.timeout, "timeout", "", "time-to-run of one attempt, for tasks that set none (default: the worker's)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts before dead-lettering, for tasks that set none (0: the worker's default)")
	fl.IntVar(&f.priority, "priority", 0, fmt.Sprintf("priority, 0 (the lowest) to %d (the highest), for tasks that set none: a worker starts the higher first", onceq.MaxPriority))
	fl.StringArrayVar(&f.headers, "header", nil, "record header key=value (repeatable)")
	fl.StringVar(&f.file, "file", "", "submit the tasks of a JSON lines file (- for stdin)")
	fl.BoolVar(&f.tx, "tx", false, "submit the whole file in one transaction: all tasks or none")
	fl.Float64Var(&f.rate, "rate", 0, "submit at most this many tasks per second (0: as fast as possible)")
	fl.Int32Var(&f.createQueues, "create-queues", 0, "create missing queues with this many partitions (0: refuse them)")
	fl.BoolVar(&f.quiet, "quiet", false, "print a summary instead of one line per task")
	fl.BoolVar(&f.unique, "unique", false, "submit the task (with --id) only if its ID is unknown, and say which")
	fl.BoolVar(&f.records, "records", producer.DefaultRecords, "record each task as pending or scheduled from its submission, so that task get, queue stats and task cancel know it before a worker runs it (--records=false for pure streams)")
	return cmd
}

// singleOnly are the flags that describe one task, refused with --file.
var singleOnly = []string{"id", "key", "delay", "at", "ttl", "header"}

func (f *produceFlags) check(cmd *cobra.Command, args []string) error {
	if len(args) > 1 {
		return usagef("onceq produce: want at most one argument, the payload (or - for stdin), got %d: quote a payload with spaces", len(args))
	}
	f.isBatch = f.file != ""
	if f.isBatch {
		if len(args) > 0 {
			return usagef("a payload argument and --file: give one; with --file each line has its payload")
		}
		for _, name := range singleOnly {
			if cmd.Flags().Changed(name) {
				return usagef("--%s describes one task: with --file, put it on each line", name)
			}
		}
		if f.unique {
			return usagef("--unique submits one task: drop --file, or submit the file with --tx")
		}
	} else if f.queue == "" {
		return usagef("--queue: missing: name the queue to submit to, for example --queue emails")
	}
	if f.unique && f.id == "" {
		return usagef("--unique: missing --id: name the task, for example --id report-2026-11")
	}
	if f.unique && f.tx {
		return usagef("--unique and --tx: give one; --unique submits in a transaction of its own")
	}
	f.stdinPayload = len(args) == 1 && args[0] == "-"
	if f.rate < 0 {
		return usagef("--rate %v: want 0 (no limit) or a positive rate per second", f.rate)
	}
	if f.createQueues < 0 {
		return usagef("--create-queues %d: want 0 (refuse missing queues) or a partition count", f.createQueues)
	}
	if f.maxAttempts < 0 || f.maxAttempts > onceq.MaxAttemptCount {
		return usagef("--max-attempts %d: want 0 (the worker's default) or 1 to %d", f.maxAttempts, onceq.MaxAttemptCount)
	}
	if onceq.ValidatePriority(f.priority) != nil {
		return usagef("--priority %d: want %s", f.priority, onceq.PriorityRange)
	}
	if f.queue != "" {
		if err := onceq.ValidateAnyQueue(f.queue); err != nil {
			return usageError{fmt.Errorf("--queue: %w", err)}
		}
	}
	return nil
}

// producerOpts maps the flags onto the producer's options.
func (f *produceFlags) producerOpts(g *globals) ([]producer.Opt, error) {
	conn, err := g.conn()
	if err != nil {
		return nil, err
	}
	timeout, err := parseDuration("--timeout", f.timeout)
	if err != nil {
		return nil, err
	}
	if timeout < 0 || timeout%time.Millisecond != 0 {
		return nil, usagef("--timeout %s: want a positive whole number of milliseconds", f.timeout)
	}
	return []producer.Opt{
		producer.Conn(conn), producer.Logger(g.log), producer.CreateQueues(f.createQueues),
		producer.TaskMaxAttempts(f.maxAttempts), producer.TaskTimeout(timeout), producer.TaskPriority(f.priority),
		producer.Records(f.records),
	}, nil
}

func (f *produceFlags) run(ctx context.Context, g *globals, args []string) error {
	opts, err := f.producerOpts(g)
	if err != nil {
		return err
	}
	out := &receipts{w: bufio.NewWriter(g.stdout), quiet: f.quiet, pending: map[int]receiptLine{}, start: time.Now()}
	defer out.w.Flush()
	if f.isBatch {
		err = f.runFile(ctx, g, opts, out)
	} else {
		err = f.runOne(ctx, g, opts, args, out)
	}
	if err == nil {
		out.summary()
	}
	return err
}

func (f *produceFlags) runOne(ctx context.Context, g *globals, opts []producer.Opt, args []string, out *receipts) error {
	s := onceq.Spec{Queue: f.queue, ID: f.id, Key: f.key, Delay: f.delay, At: f.at, TTL: f.ttl}
	switch {
	case f.stdinPayload:
		b, err := io.ReadAll(g.stdin)
		if err != nil {
			return fmt.Errorf("reading the payload from stdin: %w", err)
		}
		s.Payload = b
	case len(args) == 1:
		s.Payload = []byte(args[0])
	}
	for _, h := range f.headers {
		hd, err := parseHeader(h)
		if err != nil {
			return err
		}
		s.Headers = append(s.Headers, hd)
	}
	task, err := s.Task(time.Now(), flagName)
	if err != nil {
		return err
	}
	p, err := producer.New(opts...)
	if err != nil {
		return err
	}
	defer p.Close()
	if f.tx {
		return f.submitTx(ctx, p, []numbered{{line: 0, task: task}}, out)
	}
	if f.unique {
		return submitUnique(ctx, g, p, task)
	}
	rc, err := p.Submit(ctx, task)
	if err != nil {
		return err
	}
	out.done(0, 0, rc, nil)
	return nil
}

// submitUnique submits task unless its queue's records know its ID, and
// prints which.
func submitUnique(ctx context.Context, g *globals, p *producer.Producer, task onceq.Task) error {
	in, err := openInspector(g)
	if err != nil {
		return err
	}
	defer in.Close()
	subs, err := control.New(in).SubmitUnique(ctx, p, task)
	if err != nil {
		return err
	}
	s := subs[0]
	if s.New {
		_, err = fmt.Fprintf(g.stdout, "%s new %s/%d@%d\n", s.ID, s.Receipt.Topic, s.Receipt.Partition, s.Receipt.Offset)
	} else {
		_, err = fmt.Fprintf(g.stdout, "%s known %s\n", s.ID, s.Record.State)
	}
	return err
}
