package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/inspect"
	"github.com/onceq/onceq/producer"
)

// Server is onceq's HTTP server. Create it with New, serve its Handler
// and release it with Close.
type Server struct {
	cfg    config
	in     *inspect.Inspector
	p      *producer.Producer
	tokens *auth.Store
	mux    *http.ServeMux
	m      *metrics
	gather prometheus.Gatherer
	pull   pull
	// stopDelay stops the delay service, if the server runs one.
	stopDelay func()
}

// New checks the options and opens what the server stands on: a producer,
// an inspector and the token store (read to its end).
func New(ctx context.Context, opts ...Opt) (*Server, error) {
	cfg, err := build(opts)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), pull: pull{queues: map[string]*puller{}, leases: map[string]*lease{}}}
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
	if s.p, err = producer.New(producer.Conn(cfg.conn), producer.Logger(cfg.log), producer.CreateQueues(cfg.partitions),
		producer.MaxMessageBytes(max(cfg.maxPayload+64<<10, 1<<20))); err != nil {
		s.in.Close()
		s.tokens.Close()
		return nil, err
	}
	if cfg.delaySvc {
		if err := s.startDelay(); err != nil {
			s.Close()
			return nil, err
		}
	}
	if cfg.insecure {
		cfg.log.Warn("serving without authentication (--insecure-no-auth): anyone who reaches the server can publish, cancel and pause")
	}
	s.routes()
	return s, nil
}

// Close stops the workers of the pulled queues (the tasks handed out and
// not acknowledged run again), and releases the producer (flushing what
// it holds), the inspector and the token store.
func (s *Server) Close() error {
	s.stopPull()
	if s.stopDelay != nil {
		s.stopDelay()
	}
	s.p.Close()
	err := s.in.Close()
	s.tokens.Close()
	return err
}

// Tokens is the server's token store.
func (s *Server) Tokens() *auth.Store { return s.tokens }

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// access is what a route needs of a token.
type access int

const (
	read access = iota
	write
)

func (s *Server) routes() {
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	if s.gather != nil {
		metrics := promhttp.HandlerFor(s.gather, promhttp.HandlerOpts{})
		s.handle("GET /metrics", "metrics", read, false, func(w http.ResponseWriter, r *http.Request) { metrics.ServeHTTP(w, r) })
	}
	s.handle("GET /api/{ns}", "queues", read, true, s.queues)
	s.handle("PUT /api/{ns}/{queue}", "publish", write, true, s.publish)
	s.handle("GET /api/{ns}/{queue}", "consume", write, true, s.consume)
	s.handle("POST /api/{ns}/{queue}/bulk", "bulk", write, true, s.bulk)
	s.handle("GET /api/{ns}/{queue}/job/{id}", "job", read, true, s.job)
	s.handle("GET /api/{ns}/{queue}/job/{id}/wait", "wait", read, true, s.wait)
	s.handle("DELETE /api/{ns}/{queue}/job/{id}", "cancel", write, true, s.cancel)
	s.handle("GET /api/{ns}/{queue}/size", "size", read, true, s.size)
	s.handle("GET /api/{ns}/{queue}/stats", "stats", read, true, s.stats)
	s.handle("POST /api/{ns}/{queue}/pause", "pause", write, true, s.pause(true))
	s.handle("POST /api/{ns}/{queue}/resume", "resume", write, true, s.pause(false))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authorize(r, read, false); err != nil {
			writeError(w, err)
			return
		}
		writeError(w, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("no endpoint %s %s: see the package documentation of serve or the README's HTTP API", r.Method, r.URL.Path)})
	})
}

// handle registers a route behind the token check (a namespace's, when
// inNS) and the metrics.
func (s *Server) handle(pattern, name string, need access, inNS bool, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		if _, err := s.authorize(r, need, inNS); err != nil {
			writeError(rw, err)
		} else {
			h(rw, r)
		}
		s.m.requests.WithLabelValues(name, strconv.Itoa(rw.status)).Inc()
		s.m.seconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
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
		return auth.Token{Namespace: auth.AllNamespaces}, nil
	}
	tok, err := s.tokens.Check(tokenOf(r))
	if err != nil {
		return auth.Token{}, &apiError{status: http.StatusUnauthorized, msg: err.Error()}
	}
	if inNS && !tok.Allows(r.PathValue("ns")) {
		return auth.Token{}, &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("token %s opens namespace %s, not %s", tok.ID, tok.Namespace, r.PathValue("ns"))}
	}
	if need == write && tok.ReadOnly {
		return auth.Token{}, &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("token %s is read-only", tok.ID)}
	}
	return tok, nil
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
	status int
	field  string
	msg    string
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
	body := map[string]string{"error": ae.msg}
	if ae.field != "" {
		body["field"] = ae.field
	}
	writeJSON(w, ae.status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type metrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_http_requests_total",
			Help: "HTTP requests answered, by route and status code."}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "onceq_http_request_seconds",
			Help: "Time to answer an HTTP request, by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: registering metrics: %w", err)
		}
	}
	return m, nil
}

// startDelay starts the server's delay service.
func (s *Server) startDelay() error {
	opts := []delay.ServiceOpt{delay.Conn(s.cfg.conn), delay.Registerer(s.cfg.reg), delay.Logger(s.cfg.log.With("component", "delay"))}
	if s.cfg.dataDir != "" {
		opts = append(opts, delay.StateDir(filepath.Join(s.cfg.dataDir, "delay")))
	}
	svc, err := delay.NewService(opts...)
	if err != nil {
		return fmt.Errorf("serve: the delay service: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil && ctx.Err() == nil {
			s.cfg.log.Error("the delay service stopped", "err", err)
		}
	}()
	s.stopDelay = func() {
		cancel()
		<-done
	}
	return nil
}
