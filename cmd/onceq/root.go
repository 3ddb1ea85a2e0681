package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/ops"
	"github.com/onceq/onceq/periodic"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/workflow"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is bad input from the command line: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitCode maps an error to the process exit code: bad input of any kind
// (flags, values, task fields, connection settings, option values) is 2,
// the rest 1. A metrics address that cannot be bound (the port is taken)
// is a failure however it was wrapped: the flag's value is well formed.
func exitCode(err error) int {
	var ue usageError
	var ve *onceq.Error
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, ops.ErrListen):
		return exitFailure
	case errors.As(err, &ue), errors.As(err, &ve), errors.Is(err, broker.ErrConfig), errors.Is(err, broker.ErrSingleReplica), errors.Is(err, producer.ErrConfig),
		errors.Is(err, delay.ErrServiceConfig), errors.Is(err, delay.ErrLadder), errors.Is(err, delay.ErrLadderMismatch), errors.Is(err, ops.ErrAddress),
		errors.Is(err, workflow.ErrInvalid), errors.Is(err, workflow.ErrConfig),
		errors.Is(err, periodic.ErrInvalid), errors.Is(err, periodic.ErrConfig):
		return exitUsage
	}
	return exitFailure
}

// globals are the flags every command shares.
type globals struct {
	configPath string
	brokers    string
	logLevel   string
	logFormat  string
	tls        broker.TLS
	sasl       broker.SASL
	// replication of the topics onceq creates: --replication-factor is
	// an int, checked against broker.MaxReplicationFactor before it
	// becomes the int16 of broker.Replication.Factor.
	replicationFactor int
	replication       broker.Replication
	// viewCache is --view-cache: where the commands that read task
	// records keep their view of them between runs (openInspector).
	viewCache string

	stdin          io.Reader
	stdout, stderr io.Writer
	log            *slog.Logger
}

// conn returns the validated broker connection from the global flags.
func (g *globals) conn() (broker.Conn, error) {
	brokers, err := broker.ParseBrokers(g.brokers)
	if err != nil {
		return broker.Conn{}, usageError{fmt.Errorf("--brokers: %w", err)}
	}
	for _, b := range brokers {
		// A port out of range was taken as an address to dial, and the
		// command failed later as if the brokers were down.
		_, port, _ := net.SplitHostPort(b) // ParseBrokers checked the form
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return broker.Conn{}, usagef("--brokers: broker address %q: the port is a number from 1 to 65535, for example 127.0.0.1:9092", b)
		}
	}
	if f := g.replicationFactor; f != broker.DefaultReplicationFactor && (f < 1 || f > broker.MaxReplicationFactor) {
		return broker.Conn{}, usagef("--replication-factor %d: want %d (the brokers' default.replication.factor) or 1 to %d, for example 3",
			f, broker.DefaultReplicationFactor, broker.MaxReplicationFactor)
	}
	repl := g.replication
	repl.Factor = int16(g.replicationFactor)
	c := broker.Conn{Brokers: brokers, TLS: g.tls, SASL: g.sasl, Replication: repl}
	if err := c.Validate(); err != nil {
		return broker.Conn{}, usageError{err}
	}
	return c, nil
}

func (g *globals) setupLogger() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return usagef("--log-level %q: use debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch g.logFormat {
	case "text":
		g.log = slog.New(slog.NewTextHandler(g.stderr, opts))
	case "json":
		g.log = slog.New(slog.NewJSONHandler(g.stderr, opts))
	default:
		return usagef("--log-format %q: use text or json", g.logFormat)
	}
	return nil
}

func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "onceq",
		Short: "Run tasks and stream records on Kafka exactly once",
		Long: `onceq runs tasks and stream records on Kafka exactly once, with delays of any
length, and proves it under failure.

Start a development broker with "onceq broker", or point --brokers at Kafka or
Redpanda. Exit codes: 0 ok, 1 failure, 2 usage or bad input.

Every flag can also be set by the environment variable ONCEQ_<FLAG> (the name
in upper case, '-' as '_': ONCEQ_CHECKPOINT_DIR) or in a TOML config file named
by --config or ONCEQ_CONFIG; a flag wins over the environment, which wins over
the file. "onceq config print COMMAND" shows what a command would run with.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return g.configure(cmd)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.configPath, configFlag, "", "config file (TOML) of flag values, env ONCEQ_CONFIG; every flag also reads env ONCEQ_<FLAG>: flag > env > file > default")
	pf.StringVar(&g.brokers, "brokers", broker.DefaultBrokers, "Kafka seed brokers, host:port[,host:port]")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	pf.BoolVar(&g.tls.Enabled, "tls", false, "connect to the brokers with TLS")
	pf.StringVar(&g.tls.CAFile, "tls-ca", "", "PEM file of CAs to trust (turns TLS on)")
	pf.StringVar(&g.tls.CertFile, "tls-cert", "", "PEM client certificate for mutual TLS (with --tls-key)")
	pf.StringVar(&g.tls.KeyFile, "tls-key", "", "PEM client key for mutual TLS (with --tls-cert)")
	pf.StringVar(&g.tls.ServerName, "tls-server-name", "", "name to verify on the brokers' certificates")
	pf.BoolVar(&g.tls.InsecureSkipVerify, "tls-insecure-skip-verify", false, "do not verify the brokers' certificates (testing only)")
	pf.StringVar(&g.sasl.Mechanism, "sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	pf.StringVar(&g.sasl.User, "sasl-user", "", "SASL user")
	pf.StringVar(&g.sasl.Password, "sasl-password", "", "SASL password (better in env ONCEQ_SASL_PASSWORD than on the command line)")
	pf.IntVar(&g.replicationFactor, "replication-factor", broker.DefaultReplicationFactor,
		fmt.Sprintf("replication factor of the topics onceq creates: %d for the brokers' default.replication.factor, or 1 to %d", broker.DefaultReplicationFactor, broker.MaxReplicationFactor))
	pf.IntVar(&g.replication.MinInsyncReplicas, "min-insync-replicas", 0,
		"min.insync.replicas of the topics onceq creates: 0 for the brokers' default, or 1 to --replication-factor")
	pf.BoolVar(&g.replication.AllowSingleReplica, "allow-single-replica", false,
		"create topics of one replica on a cluster of several brokers, which losing one broker would lose (refused otherwise)")

	pf.StringVar(&g.viewCache, "view-cache", "", "directory where task, queue and workflow commands keep what they read of the task records, for the next run to read only what is new (default: onceq/views in the user's cache directory; off: read them all each run)")

	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		newBrokerCmd(g),
		newTopicsCmd(g),
		newVersionCmd(g),
		newProduceCmd(g),
		newWorkerCmd(g),
		newDemoCmd(g),
		newDelayCmd(g),
		newCheckpointCmd(g),
		newDLQCmd(g),
		newTaskCmd(g),
		newWorkflowCmd(g),
		newQueueCmd(g),
		newTokenCmd(g),
		newPeriodicCmd(g),
		newServeCmd(g),
		newBenchCmd(g),
		newConfigCmd(g),
	)
	return root
}

// run executes the CLI and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCode(err)
	if strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag") {
		code = exitUsage
	}
	fmt.Fprintf(stderr, "onceq: %v\n", strings.TrimPrefix(err.Error(), "onceq: "))
	if code == exitUsage {
		fmt.Fprintln(stderr, "Run 'onceq --help' for usage.")
	}
	return code
}

// exactArgs is cobra.ExactArgs with a usage error and a clearer message.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s: want %s, got %d argument(s)", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

// withStore checks the timeout, opens a store that follows a table topic
// (the tokens, the schedules) and runs fn.
func withStore[S interface{ Close() }](cmd *cobra.Command, g *globals, timeout time.Duration,
	open func(context.Context, broker.Conn, *slog.Logger) (S, error), fn func(context.Context, S) error) error {
	if timeout <= 0 {
		return usagef("--timeout %v: want a positive duration such as 30s", timeout)
	}
	conn, err := g.conn()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	s, err := open(ctx, conn, g.log)
	if err != nil {
		return timedOut(ctx, timeout, err)
	}
	defer s.Close()
	return timedOut(ctx, timeout, fn(ctx, s))
}

// isTerminal reports whether w is a terminal, for progress lines that
// redraw themselves.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// writeJSONLines writes each item as one line of JSON (--json of the list
// commands).
func writeJSONLines[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return nil
}
