package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
//	POST   /token/{ns}/{token}/limit             lmstfy's throttler: set the token's limit, a body
//	                                             {"read": n, "write": n, "interval": seconds}: 201,
//	                                             409 if it has one
//	PUT    /token/{ns}/{token}/limit             set or replace it: 200
//	GET    /token/{ns}/{token}/limit             the limit, and its use in this window; 404: none
//	DELETE /token/{ns}/{token}/limit             lift it: 200
//	GET    /limits                               every token's limit: [{namespace, token, limiter}]
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
	mux.HandleFunc("POST /token/{ns}/{id}/limit", s.admin(s.setTokenLimit(true)))
	mux.HandleFunc("PUT /token/{ns}/{id}/limit", s.admin(s.setTokenLimit(false)))
	mux.HandleFunc("GET /token/{ns}/{id}/limit", s.admin(s.getTokenLimit))
	mux.HandleFunc("DELETE /token/{ns}/{id}/limit", s.admin(s.liftTokenLimit))
	mux.HandleFunc("GET /limits", s.admin(s.listLimits))
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
		writeError(w, &apiError{status: http.StatusNotFound, msg: "no admin endpoint " + r.Method + " " + r.URL.Path + ": POST, GET /token/{ns}, DELETE /token/{ns}/{token}, POST, PUT, GET, DELETE /token/{ns}/{token}/limit, GET /limits, /info, /version, /pools, /metrics, /debug/pprof/"})
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

// pathToken is the token of an admin path's {id}, of namespace {ns}
// ("*": of any): {id} is the token itself, as lmstfy's admin names it,
// lmstfy's default:<token>, or the token's ID.
func (s *Server) pathToken(r *http.Request) (auth.Token, error) {
	if err := poolParam(r.URL.Query()); err != nil {
		return auth.Token{}, err
	}
	id, _ := strings.CutPrefix(r.PathValue("id"), defaultPool+":") // lmstfy's [pool:]token
	if tok, err := s.tokens.Check(id); err == nil {
		id = tok.ID
	}
	if !auth.ValidID(id) {
		return auth.Token{}, badRequest("id", "%q: want a token, or the 16 hex digits of a token's ID", r.PathValue("id"))
	}
	tok, ok := s.tokens.Lookup(id)
	if ns := r.PathValue("ns"); !ok || ns != auth.AllNamespaces && tok.Namespace != ns {
		return auth.Token{}, &apiError{status: http.StatusNotFound, field: "id", msg: fmt.Sprintf("no token of namespace %s has ID %s: GET /token/%s lists them", ns, id, ns)}
	}
	return tok, nil
}

// limitToken is pathToken of a request of a token's limit, which takes
// no parameter but lmstfy's pool; false, answered, if the request is
// refused.
func (s *Server) limitToken(w http.ResponseWriter, r *http.Request) (auth.Token, bool) {
	if err := allowParams(r.URL.Query(), "pool"); err != nil {
		writeError(w, err)
		return auth.Token{}, false
	}
	tok, err := s.pathToken(r)
	if err != nil {
		writeError(w, err)
		return auth.Token{}, false
	}
	return tok, true
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	tok, err := s.pathToken(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.tokens.Revoke(r.Context(), tok.ID); err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, auth.ErrUnknownID) {
			status = http.StatusNotFound
		}
		writeError(w, &apiError{status: status, field: "id", msg: err.Error()})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxLimitBody bounds the body of a token limit's POST or PUT.
const maxLimitBody = 1 << 10

// limitBody is what a limit's body holds, for its errors.
const limitBody = `{"read": consumes, "write": publishes, "interval": seconds}`

// setTokenLimit: POST (create) or PUT /token/{ns}/{id}/limit, lmstfy's:
// sets the token's limit, answered {"limiter": ...}, 201 or 200. A POST
// of a token that has a limit is refused (409), where lmstfy's answers
// 500. Two POSTs at once on two servers may both pass, the later
// written winning: lmstfy's are one HSETNX in Redis.
func (s *Server) setTokenLimit(create bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := s.limitToken(w, r)
		if !ok {
			return
		}
		l, err := readLimit(w, r)
		if err != nil {
			writeError(w, err)
			return
		}
		if create && tok.Limit != nil {
			writeError(w, &apiError{status: http.StatusConflict, field: "id", msg: fmt.Sprintf("token %s has a limit already (read %d, write %d, interval %d): PUT replaces it",
				tok.ID, tok.Limit.Read, tok.Limit.Write, tok.Limit.Interval)})
			return
		}
		if err := s.tokens.SetLimit(r.Context(), tok.ID, &l); err != nil {
			writeError(w, tokenError(err))
			return
		}
		status := http.StatusOK
		if create {
			status = http.StatusCreated
		}
		writeJSON(w, status, map[string]auth.Limit{"limiter": l})
	}
}

// readLimit reads a limit's body, lmstfy's JSON object: every field
// known, each a whole number, the limit valid (auth.Limit.Validate).
func readLimit(w http.ResponseWriter, r *http.Request) (auth.Limit, error) {
	var l auth.Limit
	b, err := readBody(w, r, maxLimitBody, "a limit is "+limitBody)
	if err != nil {
		return l, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err = dec.Decode(&l)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		return l, badRequest("body", "more than one JSON value: want one object, %s", limitBody)
	}
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return l, badRequest("body", "empty: want %s", limitBody)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return l, badRequest(typeErr.Field, "a JSON %s: want a whole number", typeErr.Value)
	case err != nil && strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return l, badRequest(name, "unknown field: a limit is %s", limitBody)
	case err != nil:
		return l, badRequest("body", "%v: want %s", err, limitBody)
	}
	var limitErr *auth.LimitError
	if err := l.Validate(); errors.As(err, &limitErr) {
		return l, &apiError{status: http.StatusBadRequest, field: limitErr.Field, msg: err.Error()}
	}
	return l, nil
}

// tokenError answers an error of the token store: 404 for an unknown
// token, 500 else.
func tokenError(err error) error {
	if errors.Is(err, auth.ErrUnknownID) {
		return &apiError{status: http.StatusNotFound, field: "id", msg: err.Error()}
	}
	return err
}

// getTokenLimit: GET /token/{ns}/{id}/limit, lmstfy's: the limit,
// {"read", "write", "interval"}, and onceq's "used": the requests of each
// kind it bounds in the current window, this server's and what the
// others reported.
func (s *Server) getTokenLimit(w http.ResponseWriter, r *http.Request) {
	tok, ok := s.limitToken(w, r)
	if !ok {
		return
	}
	if tok.Limit == nil {
		writeError(w, &apiError{status: http.StatusNotFound, field: "id", msg: fmt.Sprintf("token %s has no limit: a POST of %s to this path sets one", tok.ID, limitBody)})
		return
	}
	used := map[string]int64{}
	for _, kind := range []auth.UsageKind{auth.UsageRead, auth.UsageWrite} {
		if tok.Limit.Of(kind) > 0 {
			used[kind.String()] = s.throttle.used(tok, kind)
		}
	}
	writeJSON(w, http.StatusOK, struct {
		auth.Limit
		Used map[string]int64 `json:"used"`
	}{*tok.Limit, used})
}

// liftTokenLimit: DELETE /token/{ns}/{id}/limit, lmstfy's: 200
// {"msg": "success"}, whether the token had a limit or not.
func (s *Server) liftTokenLimit(w http.ResponseWriter, r *http.Request) {
	tok, ok := s.limitToken(w, r)
	if !ok {
		return
	}
	if tok.Limit != nil {
		if err := s.tokens.SetLimit(r.Context(), tok.ID, nil); err != nil {
			writeError(w, tokenError(err))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"msg": "success"})
}

// tokenLimit is a token's limit as lmstfy's GET /limits lists it: token
// is the token's ID, as the secret is never kept.
type tokenLimit struct {
	Namespace string     `json:"namespace"`
	Token     string     `json:"token"`
	Limiter   auth.Limit `json:"limiter"`
}

// listLimits: GET /limits, lmstfy's: every token's limit, by namespace
// and token creation. force_update=true reads the token store's topic to
// its end first, as lmstfy's reads its limits from Redis again.
func (s *Server) listLimits(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := allowParams(q, "force_update", "pool"); err != nil {
		writeError(w, err)
		return
	}
	if err := poolParam(q); err != nil {
		writeError(w, err)
		return
	}
	force, err := boolParam(q, "force_update")
	if err != nil {
		writeError(w, err)
		return
	}
	if force {
		if err := s.tokens.Sync(r.Context()); err != nil {
			writeError(w, err)
			return
		}
	}
	out := []tokenLimit{}
	for _, tok := range s.tokens.List("") {
		if tok.Limit != nil {
			out = append(out, tokenLimit{tok.Namespace, tok.ID, *tok.Limit})
		}
	}
	writeJSON(w, http.StatusOK, out)
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
