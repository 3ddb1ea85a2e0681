package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/internal/ops"
	"github.com/onceq/onceq/serve"
)

type serveFlags struct {
	listen, tlsCert, tlsKey, viewDir string
	adminListen, metricsAddr         string
	accountsFile                     string
	accounts                         auth.Accounts
	dataDir, pullGroup, lane         string
	insecure, noCreate, delaySvc     bool
	topicPerQueue                    bool
	workflowSvc, scheduler, records  bool
	partitions                       int32
	maxPayload, maxBulk, pullSlots   int
	pullHeld                         int
	retention, shutdown              time.Duration
	headerTimeout, bodyTimeout       time.Duration
	maxConns                         int
	rateLimit                        float64
	rateBurst                        int
}

func newServeCmd(g *globals) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API (lmstfy's paths) with tokens, /metrics, /healthz and /readyz",
		Long: `Serve onceq's HTTP API: publish (one task or a bulk array in one transaction),
consume and acknowledge, a task's state and result, waiting for it, cancel, peek,
queue size, dead letters, statistics, pause and resume, under
/api/{namespace}/{queue} as lmstfy has them, and the namespace's periodic
schedules under /periodic/{namespace}. A namespace's
queue is the topic <namespace>.<queue>, created on its first publish with
--create-queues partitions unless --no-create-queues.

Every endpoint but /healthz and /readyz needs a token of the namespace (onceq
token create NS), as the X-Token header, Authorization: Bearer or the token
parameter; a read-only token does not write. --insecure-no-auth opens every
endpoint and logs a warning. SIGINT or SIGTERM stops accepting requests, lets
those in flight finish (at most --shutdown-timeout), then exits.

Each listener holds at most --max-conns connections; one that carries no
request (idle between requests, or still sending its header) gives its place
to the next, so idle connections cannot keep requests out. --metrics-addr
serves /metrics, /healthz and /readyz on a listener of their own, for probes
that must answer whatever the API's listeners hold.

The server runs the side services its flags ask for (--delay-service,
--workflow-service, --scheduler), as onceq worker does, under the same policy:
one that stops (a state directory under --data-dir it cannot write, a broker
that refuses it) stops the server as SIGTERM does, and the command ends with
exit code 1 and an error naming it, for its supervisor to restart. /healthz
(503 while one is unhealthy) and /readyz (200 once they are all ready) report
them.`,
		Example: `  onceq token create shop
  onceq serve --listen :7700
  curl -X PUT -H "X-Token: $TOKEN" 'localhost:7700/api/shop/emails?delay=60&tries=3' -d '{"to":"ada"}'`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, g) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7700", "serve on this address")
	fl.StringVar(&f.adminListen, "admin-listen", "", "serve the admin API (POST, GET /token/{ns}, DELETE /token/{ns}/{token}, GET /info, /version, /pools, /metrics, /debug/pprof/) here, for operators' tokens (empty: off)")
	fl.StringVar(&f.accountsFile, "admin-accounts", "", "operators' accounts of the admin API, an htpasswd file of name:bcrypt-hash lines (onceq token account NAME makes one), for HTTP basic auth as lmstfy's admin accounts")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz here too, without a token, on a listener of their own outside --max-conns: point probes here (empty: off)")
	fl.StringVar(&f.tlsCert, "https-cert", "", "serve HTTPS with this certificate (PEM), with --https-key (--tls-cert is the brokers' client certificate)")
	fl.StringVar(&f.tlsKey, "https-key", "", "the HTTPS certificate's private key (PEM)")
	fl.BoolVar(&f.insecure, "insecure-no-auth", false, "serve every endpoint without a token (logs a warning)")
	fl.Int32Var(&f.partitions, "create-queues", serve.DefaultPartitions, fmt.Sprintf("partitions of a queue created by its first publish (1 to %d)", broker.MaxPartitions))
	fl.BoolVar(&f.noCreate, "no-create-queues", false, "refuse to publish to a queue that does not exist")
	fl.StringVar(&f.lane, "lane", serve.DefaultLane, "keep every namespace's queues on this lane (one topic), as lane queues <lane>/<ns>.<queue>; jobs waiting in a queue's topic from --topic-per-queue move to its lane queue when a consumer asks for the queue")
	fl.BoolVar(&f.topicPerQueue, "topic-per-queue", false, "keep each namespace's queue in a topic of its own, <ns>.<queue>, instead of on --lane")
	fl.IntVar(&f.maxPayload, "max-payload-bytes", serve.DefaultMaxPayloadBytes, "largest task payload accepted, its Job-Attr-* headers or bulk headers included (larger: 413)")
	fl.IntVar(&f.maxBulk, "max-bulk-bytes", serve.DefaultMaxBulkBytes, "largest bulk publish body accepted (larger: 413)")
	fl.StringVar(&f.viewDir, "view-dir", "", "keep the task records' view in this directory (default: in memory)")
	fl.DurationVar(&f.retention, "retention", 7*24*time.Hour, "how long finished tasks stay visible (1m or more): the workers' --result-retention")
	fl.StringVar(&f.dataDir, "data-dir", "", "keep the pulled queues' worker checkpoints and the side services' state (delay/, workflow/) here (default: in memory)")
	fl.StringVar(&f.pullGroup, "pull-group", serve.DefaultPullGroup, "consumer group of the workers that hand tasks to HTTP consumers")
	fl.IntVar(&f.pullSlots, "pull-slots", serve.DefaultPullSlots, "tasks of a queue held waiting for HTTP consumers at once, per server (those handed out count toward --pull-held)")
	fl.IntVar(&f.pullHeld, "pull-held", serve.DefaultPullHeld, "tasks held for HTTP consumers at once, per server, of every queue: handed out until their ACK or ttr, or waiting for a consumer (past it, consumes wait for one to end)")
	fl.BoolVar(&f.delaySvc, "delay-service", true, "run a delay service (retries and delayed tasks move when due)")
	fl.BoolVar(&f.workflowSvc, "workflow-service", true, "run a workflow service (starts published workflows, joins their groups)")
	fl.BoolVar(&f.scheduler, "scheduler", true, "run a periodic scheduler (submits the ticks of 'onceq periodic' schedules)")
	fl.BoolVar(&f.records, "records", serve.DefaultRecords, "record a job published without an ID from its publish, as one with an ID is, so that its task, stats and cancel know it before it is handed out (--records=false saves a record per publish)")
	fl.Float64Var(&f.rateLimit, "rate-limit", 0, "requests a second each token may make on average, 0.00001 (about one a day) or more (past it: 429 with Retry-After; 0: no limit)")
	fl.IntVar(&f.rateBurst, "rate-burst", 100, "requests a token may make at once, with --rate-limit (1 or more)")
	setsOption(fl, "RateLimit", "rate-limit", "rate-burst")
	fl.DurationVar(&f.headerTimeout, "read-header-timeout", serve.DefaultReadHeaderTimeout, "a request's header must arrive within this")
	fl.DurationVar(&f.bodyTimeout, "body-read-timeout", serve.DefaultBodyReadTimeout, "a request's body must arrive within this of its start (slower: 408, or the connection closed)")
	fl.IntVar(&f.maxConns, "max-conns", serve.DefaultMaxConns, "connections open at once on each listener; past it, the next takes the place of one idle (no request in flight) or waits for one to end")
	setsOption(fl, "ReadHeaderTimeout", "read-header-timeout")
	setsOption(fl, "BodyReadTimeout", "body-read-timeout")
	setsOption(fl, "MaxConns", "max-conns")
	fl.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long requests in flight may take to finish")
	return cmd
}

func (f *serveFlags) check() error {
	var errs []error
	if err := ops.CheckAddr("listen", f.listen); err != nil {
		errs = append(errs, err)
	}
	if f.adminListen != "" {
		if err := ops.CheckAddr("admin-listen", f.adminListen); err != nil {
			errs = append(errs, err)
		}
	}
	if f.metricsAddr != "" {
		if err := ops.CheckAddr("metrics-addr", f.metricsAddr); err != nil {
			errs = append(errs, err)
		}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		errs = append(errs, errors.New("--https-cert and --https-key go together: give both for HTTPS, or neither"))
	}
	if f.partitions < 1 {
		// Above broker.MaxPartitions, serve.Check says it.
		errs = append(errs, fmt.Errorf("--create-queues %d: want a partition count from 1 to %d (or --no-create-queues)", f.partitions, broker.MaxPartitions))
	}
	if f.accountsFile != "" {
		if err := f.readAccounts(); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case f.topicPerQueue && f.lane != serve.DefaultLane:
		errs = append(errs, fmt.Errorf("--topic-per-queue and --lane %q: give one of them: --lane keeps the queues on a lane, --topic-per-queue in a topic each", f.lane))
	case f.lane == "":
		errs = append(errs, fmt.Errorf("--lane is empty: name the lane (default %s), or give --topic-per-queue for a topic per queue", serve.DefaultLane))
	}
	if f.shutdown <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %v: want a positive duration such as 30s", f.shutdown))
	}
	return errors.Join(errs...)
}

// options are the server's options the flags set: all but how to reach
// the brokers, the logger and the registry.
func (f *serveFlags) options() []serve.Opt {
	partitions := f.partitions
	if f.noCreate {
		partitions = 0
	}
	return []serve.Opt{serve.InsecureNoAuth(f.insecure), serve.AdminAccounts(f.accounts), serve.CreateQueues(partitions), serve.Lane(f.laneName()), serve.MaxPayloadBytes(f.maxPayload),
		serve.MaxBulkBytes(f.maxBulk), serve.ViewDir(f.viewDir), serve.Retention(f.retention), serve.DataDir(f.dataDir),
		serve.PullGroup(f.pullGroup), serve.PullSlots(f.pullSlots), serve.PullHeld(f.pullHeld), serve.DelayService(f.delaySvc), serve.WorkflowService(f.workflowSvc), serve.Scheduler(f.scheduler), serve.Records(f.records),
		serve.RateLimit(f.rateLimit, f.rateBurst), serve.ReadHeaderTimeout(f.headerTimeout), serve.BodyReadTimeout(f.bodyTimeout),
		serve.MaxConns(f.maxConns)}
}

// readAccounts reads --admin-accounts.
func (f *serveFlags) readAccounts() error {
	file, err := os.Open(f.accountsFile)
	if err != nil {
		return fmt.Errorf("--admin-accounts: %w", err)
	}
	defer file.Close()
	if f.accounts, err = auth.ParseAccounts(file, f.accountsFile); err != nil {
		return fmt.Errorf("--admin-accounts: %w", err)
	}
	if f.adminListen == "" {
		return fmt.Errorf("--admin-accounts %s without --admin-listen: the accounts open the admin API, which --admin-listen serves", f.accountsFile)
	}
	return nil
}

// laneName is the server's lane: "" with --topic-per-queue.
func (f *serveFlags) laneName() string {
	if f.topicPerQueue {
		return ""
	}
	return f.lane
}

func (f *serveFlags) run(cmd *cobra.Command, g *globals) error {
	ctx := cmd.Context()
	// Every flag the command refuses, at once, before it reaches the
	// brokers.
	checked := f.check() // reads --admin-accounts, which the options take
	opts := f.options()
	if err := errors.Join(checked, flagError(cmd.Flags(), serve.Check(opts...))); err != nil {
		return usageError{err}
	}
	if g.tls.CertFile != "" && !g.tls.Enabled && g.tls.CAFile == "" {
		// Before --https-cert, serve's --tls-cert was its HTTPS
		// certificate: a command line of then must not now serve plain
		// HTTP with the certificate sent to the brokers instead.
		return usagef("--tls-cert %q is the client certificate for the brokers (mutual TLS): add --tls (or --tls-ca) to connect with it; "+
			"the HTTPS certificate of onceq serve is --https-cert, with --https-key", g.tls.CertFile)
	}
	conn, err := g.conn()
	if err != nil {
		return err
	}
	var tlsCfg *tls.Config
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return usageError{fmt.Errorf("--https-cert, --https-key: %w", err)}
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	reg := ops.NewRegistry()
	srv, err := serve.New(startCtx, append(opts, serve.Conn(conn), serve.Logger(g.log), serve.Registerer(reg))...)
	switch {
	case errors.Is(err, serve.ErrConfig):
		return flagError(cmd.Flags(), err)
	case errors.Is(err, checkpoint.ErrMismatch):
		// --data-dir of another --pull-group (or cluster): bad input.
		return usageError{err}
	case err != nil:
		return err
	}
	defer srv.Close()
	if f.metricsAddr != "" {
		// Probes on a listener of their own: no connection to the API's
		// listeners, however many, delays them.
		health := &ops.Health{}
		health.Register("serve", srv)
		ms, err := ops.Listen(f.metricsAddr, reg, health, g.log, false)
		if err != nil {
			return err
		}
		defer ms.Close()
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	ln = srv.Listener(ln)
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	hs := srv.HTTPServer(srv.Handler())
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	g.log.Info("serving", "url", scheme+"://"+ln.Addr().String(), "auth", !f.insecure)
	done := make(chan error, 2)
	go func() { done <- hs.Serve(ln) }()
	if f.adminListen != "" {
		aln, err := net.Listen("tcp", f.adminListen)
		if err != nil {
			return fmt.Errorf("--admin-listen %s: %w", f.adminListen, err)
		}
		aln = srv.Listener(aln)
		if tlsCfg != nil {
			aln = tls.NewListener(aln, tlsCfg)
		}
		admin := srv.HTTPServer(srv.AdminHandler())
		defer admin.Close()
		g.log.Info("serving the token admin API", "url", scheme+"://"+aln.Addr().String())
		go func() { done <- admin.Serve(aln) }()
	}
	// A side service that stops ends the command too (package sides'
	// failure policy), after the requests in flight, with its error.
	var failed error
	select {
	case err := <-done:
		return err
	case <-srv.Done():
		failed = srv.Err()
	case <-ctx.Done():
	}
	g.log.Info("stopping: finishing the requests in flight", "timeout", f.shutdown)
	sctx, scancel := context.WithTimeout(context.Background(), f.shutdown)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		return errors.Join(failed, fmt.Errorf("stopping the server: %w", err))
	}
	if failed != nil {
		return failed
	}
	g.log.Info("stopped")
	return nil
}
