package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/ops"
)

type workerFlags struct {
	queues          []string
	group           string
	checkpointDir   string
	handler         string
	concurrency     int
	commitInterval  time.Duration
	maxPerCommit    int
	guarantee       string
	metricsAddr     string
	shutdownTimeout time.Duration
	timeout         time.Duration
	dedupWindow     time.Duration
	maxBuffered     int
	sessionTimeout  time.Duration
	txnTimeout      time.Duration
	retryPause      time.Duration
}

func newWorkerCmd(g *globals) *cobra.Command {
	var f workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run tasks from queues exactly once, in a consumer group",
		Long: `Run tasks from queues in a consumer group. Start as many workers as you like with
the same --group: they share the queues' partitions. Each needs its own
--checkpoint-dir. Effects that go through onceq (emitted tasks, state, offsets)
commit exactly once across crashes and rebalances.

Handler kinds (--handler):
` + handlerKinds + `

It serves /metrics and /healthz on --metrics-addr and stops cleanly on SIGINT or
SIGTERM: it stops fetching, lets in-flight tasks finish (up to
--shutdown-timeout), commits and leaves the group.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWorker(cmd.Context(), g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.queues, "queue", nil, "queues to run, Q[,Q2...] (required)")
	fl.StringVar(&f.group, "group", "onceq", "consumer group; workers of one group share the queues")
	fl.StringVar(&f.checkpointDir, "checkpoint-dir", "./onceq-data/worker", "this worker's checkpoint directory (one per worker process)")
	fl.StringVar(&f.handler, "handler", "", "what to run for each task (required): noop, copy:QUEUE, count:QUEUE, exec:COMMAND, http:URL")
	fl.IntVar(&f.concurrency, "concurrency", 32, "handlers in flight; one key runs one at a time, in order")
	fl.DurationVar(&f.commitInterval, "commit-interval", 100*time.Millisecond, "how often completed tasks are committed")
	fl.IntVar(&f.maxPerCommit, "max-records-per-commit", 20_000, "commit early after this many completed tasks")
	fl.StringVar(&f.guarantee, "guarantee", string(consumer.ExactlyOnce), "exactly-once or at-least-once (no transactions, no dedup)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "127.0.0.1:0", "serve /metrics and /healthz here (port 0: any free port, logged; empty: off)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on shutdown, wait this long for in-flight tasks")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "time-to-run of tasks without onceq-timeout")
	fl.DurationVar(&f.dedupWindow, "dedup-window", 7*24*time.Hour, "how long processed task IDs are remembered")
	fl.IntVar(&f.maxBuffered, "max-buffered", 50_000, "records fetched and not yet committed, at most (bounds memory)")
	fl.DurationVar(&f.sessionTimeout, "session-timeout", 10*time.Second, "group session timeout: how long a silent worker keeps its partitions")
	fl.DurationVar(&f.txnTimeout, "transaction-timeout", 8*time.Second, "transaction timeout, below --session-timeout")
	fl.DurationVar(&f.retryPause, "retry-pause", time.Second, "pause before a failed task runs again")
	return cmd
}

func runWorker(ctx context.Context, g *globals, f workerFlags) error {
	if len(f.queues) == 0 {
		return usagef("--queue is required: name the queue(s) to run, for example --queue emails")
	}
	for _, q := range f.queues {
		if err := onceq.ValidateQueue(q); err != nil {
			return usagef("--queue: %v", err)
		}
	}
	if f.handler == "" {
		return usagef("--handler is required; one of:\n%s", handlerKinds)
	}
	h, outputs, err := parseHandler(f.handler)
	if err != nil {
		return err
	}
	guarantee, err := consumer.ParseGuarantee(f.guarantee)
	if err != nil {
		return usagef("--guarantee: %v", err)
	}
	conn, err := g.conn()
	if err != nil {
		return err
	}
	reg := ops.NewRegistry()
	w, err := consumer.New(
		consumer.Conn(conn), consumer.Group(f.group), consumer.Queues(f.queues...), consumer.CheckpointDir(f.checkpointDir),
		consumer.WithHandler(h), consumer.Concurrency(f.concurrency), consumer.CommitInterval(f.commitInterval),
		consumer.MaxRecordsPerCommit(f.maxPerCommit), consumer.WithGuarantee(guarantee), consumer.ShutdownTimeout(f.shutdownTimeout),
		consumer.DefaultTimeout(f.timeout), consumer.DedupWindow(f.dedupWindow), consumer.MaxBufferedRecords(f.maxBuffered),
		consumer.SessionTimeout(f.sessionTimeout), consumer.TransactionTimeout(f.txnTimeout), consumer.RetryPause(f.retryPause),
		consumer.Registerer(reg), consumer.Logger(g.log),
	)
	if err != nil {
		return usageError{flagNames(err)}
	}
	if err := checkQueuesExist(ctx, conn, outputs); err != nil {
		return err
	}
	if f.metricsAddr != "" {
		srv, err := ops.Listen(f.metricsAddr, reg, nil, g.log)
		if err != nil {
			return usageError{err}
		}
		defer srv.Close()
	}
	return w.Run(ctx)
}

// checkQueuesExist fails early, and clearly, when a handler's output queue
// is missing.
func checkQueuesExist(ctx context.Context, conn broker.Conn, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	for _, q := range queues {
		if _, err := adm.DescribeTopic(ctx, q); errors.Is(err, broker.ErrTopicNotFound) {
			return fmt.Errorf("output queue %q does not exist: create it with 'onceq topics create %s'", q, q)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// flagNames rewrites the library's option names in an error to the CLI's
// flag names, so the message says which flag to fix.
func flagNames(err error) error {
	r := strings.NewReplacer(
		"concurrency ", "--concurrency ", "commit interval", "--commit-interval", "max records per commit", "--max-records-per-commit",
		"max buffered records", "--max-buffered", "dedup window", "--dedup-window", "default timeout", "--timeout",
		"transaction timeout", "--transaction-timeout", "shutdown timeout", "--shutdown-timeout", "retry pause", "--retry-pause",
		"group ", "--group ",
	)
	return errors.New(r.Replace(err.Error()))
}
