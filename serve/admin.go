package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/inspect"
)

// AdminHandler is the admin API, lmstfy's admin listener: serve it on an
// address of its own (onceq serve --admin-listen), where only operators
// reach it. Every request needs an operator's token: namespace "*",
// read-write (onceq token create '*'), given as any API token is, or as
// the password of HTTP basic auth; or, by basic auth, the name and
// password of an admin account (AdminAccounts), lmstfy's.
//
//	POST   /token/{ns}?description=&read_only=   create a token: 201 {"token": ...}, shown once
//	GET    /token/{ns}                           the namespace's tokens ("*": every one)
//	DELETE /token/{ns}/{token}                   revoke one, by its ID or the token itself: 204
//	GET    /info                                 lmstfy's: the namespaces and their queues
//	GET    /version                              lmstfy's: version, build_commit, build_date
//	GET    /pools                                lmstfy's: the pools, ["default"]
//	GET    /metrics                              Prometheus: onceq's series and lmstfy's
//	                                             (infra_lmstfy_*), for lmstfy's dashboards
//	GET    /debug/pprof/                         Go's profiles (net/http/pprof)
func (s *Server) AdminHandler() http.Handler {
	lm := newLmstfyMetrics()
	if !s.lm.CompareAndSwap(nil, lm) {
		lm = s.lm.Load()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token/{ns}", s.admin(s.createToken))
	mux.HandleFunc("GET /token/{ns}", s.admin(s.listTokens))
	mux.HandleFunc("DELETE /token/{ns}/{id}", s.admin(s.revokeToken))
	mux.HandleFunc("GET /info", s.admin(s.info))
	mux.HandleFunc("GET /version", s.admin(s.version))
	mux.HandleFunc("GET /pools", s.admin(pools))
	gather := prometheus.Gatherers{lm.reg}
	if s.gather != nil {
		gather = append(gather, s.gather)
	}
	mux.HandleFunc("GET /metrics", s.admin(promhttp.HandlerFor(gather, promhttp.HandlerOpts{}).ServeHTTP))
	mux.HandleFunc("GET /debug/pprof/", s.admin(pprof.Index))
	mux.HandleFunc("GET /debug/pprof/cmdline", s.admin(pprof.Cmdline))
	mux.HandleFunc("GET /debug/pprof/profile", s.admin(pprof.Profile))
	mux.HandleFunc("GET /debug/pprof/symbol", s.admin(pprof.Symbol))
	mux.HandleFunc("GET /debug/pprof/trace", s.admin(pprof.Trace))
	mux.HandleFunc("/", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, msg: "no admin endpoint " + r.Method + " " + r.URL.Path + ": POST, GET /token/{ns}, DELETE /token/{ns}/{token}, GET /info, /version, /pools, /metrics, /debug/pprof/"})
	}))
	return requestID(s.bodyDeadline(mux))
}

// adminToken finds an admin request's token: as an API request's, or the
// password of basic auth.
func adminToken(r *http.Request) string {
	if _, pw, ok := r.BasicAuth(); ok {
		return pw
	}
	return tokenOf(r)
}

// admin lets operators' tokens through, with a valid namespace in the
// path.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var tok auth.Token
		var err error
		if name, pw, ok := r.BasicAuth(); ok && s.cfg.accounts[name] != nil {
			if _, ok := s.cfg.accounts.Check(name, pw); ok {
				tok = auth.Token{ID: "account " + name, Namespace: auth.AllNamespaces}
			} else {
				err = fmt.Errorf("wrong password of admin account %s", name)
			}
		} else {
			tok, err = s.tokens.Check(adminToken(r))
		}
		if err != nil && r.Header.Get("Authorization") != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="onceq admin"`)
		}
		switch {
		case err != nil:
			writeError(w, &apiError{status: http.StatusUnauthorized, msg: err.Error()})
			return
		case tok.Namespace != auth.AllNamespaces || tok.ReadOnly:
			writeError(w, &apiError{status: http.StatusForbidden, msg: "the admin API needs an operator's token: namespace \"*\", read-write (onceq token create '*')"})
			return
		}
		if ns := r.PathValue("ns"); ns != "" {
			if err := auth.ValidateNamespace(ns); err != nil {
				writeError(w, badRequest("namespace", "%v", err))
				return
			}
		}
		h(w, r)
	}
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	// lmstfy's admin takes the parameters in the query or a form body.
	if err := r.ParseForm(); err != nil {
		writeError(w, badRequest("body", "%v", err))
		return
	}
	q := r.Form
	if err := allowParams(q, "description", "read_only", "pool"); err != nil {
		writeError(w, err)
		return
	}
	if err := poolParam(q); err != nil {
		writeError(w, err)
		return
	}
	ro := false
	if v := q.Get("read_only"); v != "" {
		var err error
		if ro, err = strconv.ParseBool(v); err != nil {
			writeError(w, badRequest("read_only", "%q: want true or false", v))
			return
		}
	}
	tok, info, err := s.tokens.Create(r.Context(), r.PathValue("ns"), ro, q.Get("description"))
	if err != nil {
		writeError(w, badRequest("description", "%s", strings.TrimPrefix(err.Error(), "auth: ")))
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"token": tok, "id": info.ID, "namespace": info.Namespace, "read_only": info.ReadOnly})
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	if ns == auth.AllNamespaces {
		ns = ""
	}
	toks := s.tokens.List(ns)
	if toks == nil {
		toks = []auth.Token{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": toks})
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := poolParam(r.URL.Query()); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if _, t, ok := strings.Cut(id, ":"); ok && strings.HasPrefix(id, defaultPool+":") {
		id = t // lmstfy's [pool:]token
	}
	if tok, err := s.tokens.Check(id); err == nil {
		id = tok.ID // the token itself, as lmstfy's admin names it
	}
	if !auth.ValidID(id) {
		writeError(w, badRequest("id", "%q: want a token, or the 16 hex digits of a token's ID", r.PathValue("id")))
		return
	}
	inNS := slices.ContainsFunc(s.tokens.List(r.PathValue("ns")), func(t auth.Token) bool { return t.ID == id })
	if !inNS && r.PathValue("ns") != auth.AllNamespaces {
		writeError(w, &apiError{status: http.StatusNotFound, field: "id", msg: "no token of this namespace has this ID"})
		return
	}
	if err := s.tokens.Revoke(r.Context(), id); err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, auth.ErrUnknownID) {
			status = http.StatusNotFound
		}
		writeError(w, &apiError{status: status, field: "id", msg: err.Error()})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// defaultPool is lmstfy's one pool: onceq has one cluster.
const defaultPool = "default"

// poolParam accepts lmstfy's pool parameter for its one pool.
func poolParam(q url.Values) error {
	if p := q.Get("pool"); p != "" && p != defaultPool {
		return badRequest("pool", "%q: onceq has one pool, %q", p, defaultPool)
	}
	return nil
}

// pools: GET /pools, lmstfy's.
func pools(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, []string{defaultPool})
}

// info: GET /info, lmstfy's: every namespace's queues, the topics named
// <namespace>.<queue>, or on a lane its lane queues <lane>/<ns>.<queue>
// with tasks recorded.
func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	if err := poolParam(r.URL.Query()); err != nil {
		writeError(w, err)
		return
	}
	topics, err := s.queueNames(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := map[string][]string{}
	for _, t := range topics {
		if _, label, ok := onceq.SplitLane(t); ok {
			t = label
		}
		ns, q, ok := strings.Cut(t, ".")
		if ok && auth.ValidateNamespace(ns) == nil && ns != auth.AllNamespaces && onceq.ValidateQueue(t) == nil {
			out[ns] = append(out[ns], q)
		}
	}
	for _, qs := range out {
		slices.Sort(qs)
	}
	writeJSON(w, http.StatusOK, out)
}

// queueNames lists the namespaces' queues: the topics, or on a lane its
// lane queues with tasks recorded.
func (s *Server) queueNames(ctx context.Context) ([]string, error) {
	if s.cfg.lane != "" {
		qs, err := s.in.LaneQueues(ctx, s.cfg.lane)
		if errors.Is(err, inspect.ErrNoQueue) {
			return nil, nil // no task recorded on the lane yet
		}
		return qs, err
	}
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	return adm.ListTopics(ctx, false)
}

// version: GET /version, lmstfy's fields, from the binary's build
// information.
func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	v := map[string]string{"version": "unknown", "build_commit": "unknown", "build_date": "unknown"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v["version"] = bi.Main.Version
		}
		for _, st := range bi.Settings {
			switch st.Key {
			case "vcs.revision":
				v["build_commit"] = st.Value
			case "vcs.time":
				v["build_date"] = st.Value
			}
		}
	}
	writeJSON(w, http.StatusOK, v)
}
