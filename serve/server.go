package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/control"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/internal/ops"
	"github.com/onceq/onceq/internal/sides"
	"github.com/onceq/onceq/internal/tracing"
	"github.com/onceq/onceq/periodic"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve/internal/console"
	"github.com/onceq/onceq/serve/internal/pull"
)

// Server is onceq's HTTP server. Create it with New, serve its Handler
// and release it with Close.
type Server struct {
	cfg       config
	in        *inspect.Inspector
	ctl       *control.Controller // writes through in
	p         *producer.Producer
	tokens    *auth.Store
	dlq       *dlq.Reader
	mux       *http.ServeMux
	schedules *periodic.Store
	m         *metrics
	gather    prometheus.Gatherer
	lm        atomic.Pointer[lmstfyMetrics] // lmstfy's series, once AdminHandler is asked for
	pull      *pull.Pull
	// laneBacklog is what the server read of its lane's backlog, for
	// the sizes of lane queues (lanesize.go).
	laneBacklog laneBacklog
	// sides are the side services the server runs (DelayService,
	// WorkflowService, Scheduler); stopSides stops them, sidesDone is
	// closed once they stopped, with sidesErr.
	sides     *sides.Set
	stopSides context.CancelFunc
	sidesDone chan struct{}
	sidesErr  error

	limitMu  sync.Mutex
	limiters map[string]*rate.Limiter // by token ID, with RateLimit
	// throttle counts the requests of tokens that have a limit, lmstfy's
	// throttler's (throttle.go).
	throttle *throttle
}

// New checks the options and opens what the server stands on: a producer,
// an inspector, and the token and schedule stores (read to their ends).
func New(ctx context.Context, opts ...Opt) (*Server, error) {
	cfg, err := build(opts)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), limiters: map[string]*rate.Limiter{}}
	if s.m, err = newMetrics(cfg.reg); err != nil {
		return nil, err
	}
	if g, ok := cfg.reg.(prometheus.Gatherer); ok {
		s.gather = g
	}
	if s.tokens, err = auth.Open(ctx, cfg.conn, cfg.log); err != nil {
		return nil, err
	}
	iopts := []inspect.Opt{inspect.Conn(cfg.conn), inspect.Logger(cfg.log), inspect.Retention(cfg.retention)}
	if cfg.viewDir != "" {
		iopts = append(iopts, inspect.Dir(cfg.viewDir))
	}
	if s.in, err = inspect.Open(iopts...); err != nil {
		s.tokens.Close()
		return nil, err
	}
	s.ctl = control.New(s.in)
	if s.dlq, err = dlq.NewReader(cfg.conn); err != nil {
		s.in.Close()
		s.tokens.Close()
		return nil, err
	}
	if s.p, err = producer.New(producer.Records(cfg.records), producer.Conn(cfg.conn), producer.Logger(cfg.log), producer.CreateQueues(cfg.partitions), producer.Registerer(cfg.reg),
		producer.MaxMessageBytes(max(cfg.maxPayload+64<<10, 1<<20))); err != nil {
		s.dlq.Close()
		s.in.Close()
		s.tokens.Close()
		return nil, err
	}
	if s.pull, err = pull.Open(ctx, pull.Config{Conn: cfg.conn, Log: cfg.log, Reg: cfg.reg, Group: cfg.pullGroup, Slots: cfg.pullSlots, Held: cfg.pullHeld,
		Retention: cfg.retention, DataDir: cfg.dataDir, Lane: cfg.lane, Partitions: cfg.partitions, ReleaseAfter: cfg.releaseAfter, AckRunWait: cfg.ackRunWait,
		Records: s.in}); err != nil {
		s.p.Close()
		s.dlq.Close()
		s.in.Close()
		s.tokens.Close()
		return nil, err
	}
	if s.schedules, err = periodic.Open(ctx, cfg.conn, cfg.log.With("component", "periodic")); err != nil {
		s.pull.Close()
		s.p.Close()
		s.dlq.Close()
		s.in.Close()
		s.tokens.Close()
		return nil, err
	}
	if err := s.pull.Start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.startServices(); err != nil {
		s.Close()
		return nil, err
	}
	if cfg.insecure {
		cfg.log.Warn("serving without authentication (--insecure-no-auth): anyone who reaches the server can publish, cancel and pause")
	}
	s.throttle = newThrottle(s.tokens, s.m.throttled)
	s.throttle.start()
	s.routes()
	return s, nil
}

// Close stops the workers of the pulled queues (the tasks handed out and
// not acknowledged run again) and the side services, and releases the
// producer (flushing what it holds), the inspector and the token and
// schedule stores.
func (s *Server) Close() error {
	s.pull.Stop()
	if s.stopSides != nil {
		s.stopSides()
		<-s.sidesDone
	}
	s.pull.Close()
	s.schedules.Close()
	s.p.Close()
	s.dlq.Close()
	err := s.in.Close()
	if s.throttle != nil {
		s.throttle.close()
	}
	s.tokens.Close()
	return err
}

// Healthy returns nil while the side services the server runs and its
// pull worker work, or one line for each that does not: what /healthz
// answers. With Ready, it serves probes on a listener of their own too
// (onceq serve --metrics-addr), which no connection to the API's
// listeners delays.
func (s *Server) Healthy() error {
	return errors.Join(s.sides.Healthy(), named("pull", s.pull.Healthy()))
}

// Ready returns nil once the side services the server runs and its pull
// worker are ready, or one line for each that is not: what /readyz
// answers.
func (s *Server) Ready() error { return errors.Join(s.sides.Ready(), named("pull", s.pull.Ready())) }

// Tokens is the server's token store.
func (s *Server) Tokens() *auth.Store { return s.tokens }

// Handler is the server's HTTP handler: serve it with HTTPServer on a
// Listener, or bound its header reads and connections yourself.
func (s *Server) Handler() http.Handler { return requestID(s.bodyDeadline(s.mux)) }

// access is what a route needs of a token.
type access int

const (
	read access = iota
	write
	// operate is an operator's: a token of every namespace ("*").
	operate
)

// A route is one endpoint of the API: the table below is what the server
// serves and what the OpenAPI document is checked against.
type route struct {
	method, path string // path in http.ServeMux's pattern syntax
	name         string // the metrics' route label
	need         access
	params       []string // the query parameters it takes (and token)
	h            http.HandlerFunc
}

// lmstfyRoutes are lmstfy's routes, by name: they ignore the query
// parameters they do not take, as lmstfy does, so that newer clients
// work.
var lmstfyRoutes = map[string]bool{"publish": true, "consume": true, "destroy": true, "bulk_lmstfy": true,
	"peek": true, "job": true, "republish": true, "cancel": true, "size": true, "deadletter": true,
	"deadletter_size": true, "respawn": true, "deadletter_delete": true}

// publishParams are a publish's query parameters: lmstfy's delay, ttl
// and tries, and onceq's id, timeout and priority.
var publishParams = []string{"id", "delay", "ttl", "tries", "timeout", "priority"}

// apiRoutes are the endpoints under /api.
func (s *Server) apiRoutes() []route {
	return []route{
		{"GET", "/api/openapi.json", "openapi", read, nil, serveOpenAPI},
		{"GET", "/api/{ns}", "queues", read, []string{"filter", "after", "before", "limit"}, s.queues},
		{"PUT", "/api/{ns}/{queue}", "publish", write, publishParams, s.publish},
		{"GET", "/api/{ns}/{queue}", "consume", write, []string{"ttr", "timeout", "count", "freeze_tries"}, s.consume},
		{"DELETE", "/api/{ns}/{queue}", "destroy", write, nil, s.destroy},
		{"POST", "/api/{ns}/{queue}/bulk", "bulk", write, nil, s.bulk},
		{"PUT", "/api/{ns}/{queue}/bulk", "bulk_lmstfy", write, []string{"delay", "ttl", "tries", "timeout", "priority"}, s.bulkLmstfy},
		{"GET", "/api/{ns}/{queue}/peek", "peek", read, nil, s.peekQueue},
		{"GET", "/api/{ns}/{queue}/job/{id}", "job", read, nil, s.job},
		{"GET", "/api/{ns}/{queue}/task/{id}", "task", read, nil, s.task},
		{"PUT", "/api/{ns}/{queue}/job/{id}", "republish", write, []string{"delay", "ttl", "tries", "timeout", "priority"}, s.republish},
		{"GET", "/api/{ns}/{queue}/job/{id}/wait", "wait", read, []string{"timeout"}, s.wait},
		{"DELETE", "/api/{ns}/{queue}/job/{id}", "cancel", write, []string{"lease"}, s.cancel},
		{"POST", "/api/{ns}/{queue}/job/{id}/cancel", "cancel_job", write, []string{"ahead"}, s.cancelJob},
		{"GET", "/api/{ns}/{queue}/workflow/{id}", "workflow", read, nil, s.workflowStatus},
		{"GET", "/api/{ns}/{queue}/workflow/{id}/wait", "workflow_wait", read, []string{"timeout"}, s.workflowWait},
		{"DELETE", "/api/{ns}/{queue}/workflow/{id}", "workflow_cancel", write, nil, s.workflowCancel},
		{"POST", "/api/{ns}/{queue}/workflow/{id}/retry", "workflow_retry", write, nil, s.workflowRetry},
		{"GET", "/api/{ns}/{queue}/size", "size", read, nil, s.size},
		{"GET", "/api/{ns}/{queue}/stats", "stats", read, nil, s.stats},
		{"POST", "/api/{ns}/{queue}/pause", "pause", write, nil, s.pause(true)},
		{"POST", "/api/{ns}/{queue}/resume", "resume", write, nil, s.pause(false)},
		{"GET", "/api/{ns}/{queue}/limit", "limit", read, nil, s.getLimit},
		{"PUT", "/api/{ns}/{queue}/limit", "limit_set", write, []string{"rate", "running"}, s.setLimit},
		{"DELETE", "/api/{ns}/{queue}/limit", "limit_lift", write, nil, s.liftLimit},
		{"GET", "/api/{ns}/{queue}/deadletter", "deadletter", read, []string{"limit"}, s.deadLetters},
		{"GET", "/api/{ns}/{queue}/deadletter/size", "deadletter_size", read, nil, s.deadLetterSize},
		{"PUT", "/api/{ns}/{queue}/deadletter", "respawn", write, []string{"limit", "ttl", "id"}, s.respawn},
		{"DELETE", "/api/{ns}/{queue}/deadletter", "deadletter_delete", write, []string{"limit"}, s.deleteDeadLetters},
		{"GET", schedulesPath, "periodic_list", read, nil, s.listSchedules},
		{"GET", schedulesPath + "/{name}", "periodic_get", read, nil, s.getSchedule},
		{"PUT", schedulesPath + "/{name}", "periodic_put", write, scheduleParams, s.putSchedule},
		{"DELETE", schedulesPath + "/{name}", "periodic_delete", write, nil, s.deleteSchedule},
	}
}

func (s *Server) routes() {
	// Probes, without a token: the health and readiness (ops.Checker) of
	// the server's side services and of its pull worker, one line each
	// that is not.
	s.mux.HandleFunc("GET /healthz", ops.Probe(s.Healthy))
	s.mux.HandleFunc("GET /readyz", ops.Probe(s.Ready))
	if s.gather != nil {
		metrics := promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{})
		// Every namespace's queues and volumes: an operator's token only.
		s.handle(route{"GET", "/metrics", "metrics", operate, nil, metrics.ServeHTTP})
	}
	for _, rt := range s.apiRoutes() {
		s.handle(rt)
	}
	console.Register(s.mux, console.Deps{Conn: s.cfg.conn, Log: s.cfg.log, Lane: s.cfg.lane, Insecure: s.cfg.insecure, Tokens: s.tokens,
		In: s.in, Ctl: s.ctl, P: s.p, DLQ: s.dlq, Schedules: s.schedules, API: consoleAPI{s}})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authorize(r, read, false); err != nil {
			writeError(w, err)
			return
		}
		writeError(w, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no endpoint %s %s: GET /api/openapi.json lists them", r.Method, r.URL.Path)})
	})
}

// handle registers a route behind the token check (the namespace's, for
// a path under /api/{ns}), the check of its query parameters, and the
// metrics.
func (s *Server) handle(rt route) {
	inNS := strings.HasPrefix(rt.path, "/api/{ns}") || strings.HasPrefix(rt.path, schedulesPath)
	s.mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		if r.Header.Get(tracing.ParentHeader) != "" {
			var end func(status int)
			r, end = traceRequest(r, rt)
			defer func() { end(sw.status) }()
		}
		tok, err := s.authorize(r, rt.need, inNS)
		if err != nil {
			writeError(sw, err)
		} else if err := s.allowParams(r, rt); err != nil {
			writeError(sw, err)
		} else if done, err := s.throttle.take(tok, rt.name); err != nil {
			writeError(sw, err)
		} else {
			rt.h(sw, r)
			done(sw.status)
		}
		took := time.Since(start)
		s.m.requests.WithLabelValues(rt.name, strconv.Itoa(sw.status)).Inc()
		s.m.seconds.WithLabelValues(rt.name).Observe(took.Seconds())
		if inNS {
			s.lm.Load().request(rt, r.PathValue("ns"), sw.status, took, tok.ID)
		}
	})
}

// authorize checks the request's token: it must exist, open the path's
// namespace (inNS) and, for need == write, not be read-only.
func (s *Server) authorize(r *http.Request, need access, inNS bool) (auth.Token, error) {
	if inNS {
		if err := auth.ValidateNamespace(r.PathValue("ns")); err != nil || r.PathValue("ns") == auth.AllNamespaces {
			return auth.Token{}, badRequest("namespace", "%s", nsError(r.PathValue("ns"), err))
		}
	}
	if s.cfg.insecure {
		// No token to count requests by: the client's address.
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		if wait := s.limit("addr " + host); wait > 0 {
			return auth.Token{}, &apiError{status: http.StatusTooManyRequests, retryAfter: wait,
				msg: fmt.Sprintf("client %s is past its limit of %v requests a second: retry after %v", host, s.cfg.rate, wait.Round(time.Millisecond))}
		}
		return auth.Token{Namespace: auth.AllNamespaces}, nil
	}
	tok, err := s.tokens.Check(tokenOf(r))
	if err != nil {
		return auth.Token{}, &apiError{status: http.StatusUnauthorized, msg: err.Error()}
	}
	if inNS && !tok.Allows(r.PathValue("ns")) {
		return auth.Token{}, &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("token %s opens namespace %s, not %s", tok.ID, tok.Namespace, r.PathValue("ns"))}
	}
	if need == operate && tok.Namespace != auth.AllNamespaces {
		return auth.Token{}, &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("token %s opens namespace %s: this endpoint needs an operator's token, of every namespace (onceq token create '*')", tok.ID, tok.Namespace)}
	}
	if need == write && tok.ReadOnly {
		return auth.Token{}, &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("token %s is read-only", tok.ID)}
	}
	if wait := s.limit(tok.ID); wait > 0 {
		return tok, &apiError{status: http.StatusTooManyRequests, retryAfter: wait,
			msg: fmt.Sprintf("token %s is past its limit of %v requests a second: retry after %v", tok.ID, s.cfg.rate, wait.Round(time.Millisecond))}
	}
	return tok, nil
}

// limit takes one request from a token's allowance and returns 0, or how
// long to wait when there is none left.
func (s *Server) limit(id string) time.Duration {
	if s.cfg.rate == 0 {
		return 0
	}
	s.limitMu.Lock()
	l, ok := s.limiters[id]
	if !ok {
		l = rate.NewLimiter(rate.Limit(s.cfg.rate), s.cfg.burst)
		s.limiters[id] = l
	}
	s.limitMu.Unlock()
	r := l.Reserve()
	d := r.Delay()
	if d > 0 {
		r.Cancel()
	}
	return d
}

// named prefixes err, if any, with a component's name, as the probes
// name the side services.
func named(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

func nsError(ns string, err error) string {
	if err == nil {
		return fmt.Sprintf("namespace %q: \"*\" names every namespace in a token, not in a path", ns)
	}
	return err.Error()
}

// tokenOf finds a request's token: X-Token, Authorization: Bearer, or the
// token query parameter (as lmstfy accepts).
func tokenOf(r *http.Request) string {
	if t := r.Header.Get("X-Token"); t != "" {
		return t
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return r.URL.Query().Get("token")
}

// statusWriter remembers the status written, for the metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// apiError is an error answered with its status and, for a bad parameter,
// the parameter's name.
type apiError struct {
	status     int
	field      string
	msg        string
	retryAfter time.Duration // for a 429
	// lmstfyMsg is lmstfy's message, answered as "msg" too: a token's
	// limit's 429 (throttle.go).
	lmstfyMsg string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, field: field, msg: field + ": " + fmt.Sprintf(format, args...)}
}

// writeError answers err: an apiError as it says, anything else 500.
func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	if ae.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ae.retryAfter.Seconds()))))
	}
	body := map[string]string{"error": ae.msg}
	if ae.field != "" {
		body["field"] = ae.field
	}
	if ae.lmstfyMsg != "" {
		body["msg"] = ae.lmstfyMsg
	}
	writeJSON(w, ae.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type metrics struct {
	requests  *prometheus.CounterVec
	seconds   *prometheus.HistogramVec
	throttled *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_http_requests_total",
			Help: "HTTP requests answered, by route and status code."}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "onceq_http_request_seconds",
			Help: "Time to answer an HTTP request, by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"route"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_http_token_limit_refusals_total",
			Help: "Requests answered 429 because their token reached its limit (the admin API's /token/{ns}/{id}/limit), by route."}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.seconds, m.throttled} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: registering metrics: %w", err)
		}
	}
	return m, nil
}

// startServices starts the side services the server runs (DelayService,
// WorkflowService, Scheduler), under the failure policy of package
// sides: one that stops stops the others and closes Done.
func (s *Server) startServices() error {
	set, err := sides.New(sides.Config{Conn: s.cfg.conn, Registerer: s.cfg.reg, Logger: s.cfg.log, Dir: s.cfg.dataDir,
		Delay: s.cfg.delaySvc, Workflow: s.cfg.workflowSvc, Scheduler: s.cfg.scheduler})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	s.sides, s.stopSides, s.sidesDone = set, stop, make(chan struct{})
	go func() {
		defer close(s.sidesDone)
		s.sidesErr = set.Run(ctx, nil)
	}()
	return nil
}

// Done is closed once the side services the server runs (DelayService,
// WorkflowService, Scheduler) stopped: because one of them stopped, when
// Err names it, or because Close stopped them. A server whose side
// service stopped goes on answering requests, but retries and delayed
// tasks no longer move (or workflows do not start, or schedules do not
// tick): stop serving and return Err, so that the process's supervisor
// starts the server again, as onceq serve does.
func (s *Server) Done() <-chan struct{} { return s.sidesDone }

// Err is nil until Done is closed; then the error naming the side
// service that stopped ("the delay service stopped: ..."), or nil when
// Close stopped them.
func (s *Server) Err() error {
	select {
	case <-s.sidesDone:
		return s.sidesErr
	default:
		return nil
	}
}
