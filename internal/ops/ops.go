// Package ops serves what every long-running onceq command exposes to
// operators: Prometheus metrics on /metrics, liveness on /healthz and
// readiness on /readyz, from the health of the components a command
// registers (Health, Checker); and BrokerHealth, which tells from a
// franz-go client's hooks whether it reaches its brokers and its group.
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	// ErrAddress is a listen address that is not host:port with a port
	// from 0 to 65535: bad input.
	ErrAddress = errors.New("invalid listen address")
	// ErrListen is a valid address that cannot be listened on (the port
	// is taken, the host is not this machine's): the command fails, the
	// input is not at fault.
	ErrListen = errors.New("cannot listen")
)

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// A Checker is a component whose health a command reports: a worker, a
// delay service.
type Checker interface {
	// Healthy returns nil while the component works: it runs, reaches
	// its brokers and is a member of its group. /healthz answers 503
	// while any component is unhealthy.
	Healthy() error
	// Ready returns nil once the component does its job: it joined its
	// group and restored what it needs (a worker's checkpoint, the delay
	// service's cursors). /readyz answers 503 until every component is.
	Ready() error
}

// CheckerFuncs is a Checker made of two functions; a nil one reports nil.
type CheckerFuncs struct {
	HealthyFunc, ReadyFunc func() error
}

// Healthy calls HealthyFunc.
func (c CheckerFuncs) Healthy() error { return call(c.HealthyFunc) }

// Ready calls ReadyFunc.
func (c CheckerFuncs) Ready() error { return call(c.ReadyFunc) }

func call(f func() error) error {
	if f == nil {
		return nil
	}
	return f()
}

// Health is the set of components a server reports on. Register them
// before or after Listen. The zero value has none and reports ok; a nil
// *Health too. It is safe for concurrent use.
type Health struct {
	mu    sync.Mutex
	names []string
	comps []Checker
}

// Register adds a component under a name ("worker", "delay").
func (h *Health) Register(name string, c Checker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names = append(h.names, name)
	h.comps = append(h.comps, c)
}

// Healthy returns the problems of every unhealthy component, each
// prefixed with its name; nil when all are healthy.
func (h *Health) Healthy() error { return h.check(Checker.Healthy) }

// Ready returns why components are not ready; nil when all are.
func (h *Health) Ready() error { return h.check(Checker.Ready) }

func (h *Health) check(f func(Checker) error) error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	names, comps := h.names, h.comps
	h.mu.Unlock()
	var errs []error
	for i, c := range comps {
		if err := f(c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", names[i], err))
		}
	}
	return errors.Join(errs...)
}

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// CheckAddr checks the listen address addr of the flag named flag
// ("listen", "metrics-addr"), without listening: host:port with a port
// from 0 (any free port) to 65535; the host may be empty (every
// interface). The error names the flag and wraps ErrAddress.
func CheckAddr(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
			err = errors.New("the port is a number from 0 to 65535")
		}
	}
	if err != nil {
		return fmt.Errorf("ops: --%s %q: %w: want host:port, for example 127.0.0.1:9464, or :9464 for every interface (%v)", flag, addr, ErrAddress, err)
	}
	return nil
}

// CheckPprofAddr checks the address of a listener that serves Go's
// profiles (--pprof): a loopback one, since a profile shows the
// process's memory and serves no token. The error wraps ErrAddress.
func CheckPprofAddr(addr string) error {
	if err := CheckAddr("metrics-addr", addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("ops: --pprof serves Go's profiles, which show the process's memory, on --metrics-addr %q: %w: "+
			"give it a loopback address, for example 127.0.0.1:9464, and reach it through ssh or kubectl port-forward", addr, ErrAddress)
	}
	return nil
}

// Listen binds addr and starts serving in the background: /metrics from
// reg, /healthz and /readyz from health (nil: always ok), and with
// withPprof Go's profiles on /debug/pprof/ (addr must then be a loopback
// address: CheckPprofAddr). A malformed addr is an error wrapping
// ErrAddress; one that cannot be bound, ErrListen; both name addr as
// --metrics-addr, the flag of every command that serves them.
//
// /healthz and /readyz answer 200 "ok", or 503 with one line per
// component that is not healthy (ready), naming it.
func Listen(addr string, reg *prometheus.Registry, health *Health, log *slog.Logger, withPprof bool) (*Server, error) {
	check := func(addr string) error { return CheckAddr("metrics-addr", addr) }
	if withPprof {
		check = CheckPprofAddr
	}
	if err := check(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ops: --metrics-addr %s: %w: %w", addr, ErrListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", Probe(health.Healthy))
	mux.HandleFunc("/readyz", Probe(health.Ready))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return s, nil
}

// Probe answers a health probe from check: 200 "ok" while it returns
// nil, else 503 with its error (Health's: one line per component).
func Probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if err := check(); err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.TrimSpace(err.Error()))
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// Start runs start, the connecting step of a component's Run. On failure
// it runs closeAll, and a failure caused by ctx ending (a stop while
// starting) is no error: nothing ran, nothing is left to commit. ok says
// whether Run goes on.
func Start(ctx context.Context, log *slog.Logger, start func(context.Context) error, closeAll func()) (ok bool, err error) {
	if err := start(ctx); err != nil {
		closeAll()
		if ctx.Err() != nil {
			log.Info("stopped while starting", "err", err)
			return false, nil
		}
		return false, err
	}
	return true, nil
}
