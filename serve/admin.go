package serve

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/onceq/onceq/auth"
)

// AdminHandler is the token admin API, lmstfy's admin listener: serve it
// on an address of its own (onceq serve --admin-listen), where only
// operators reach it. Every request needs an operator's token: namespace
// "*", read-write (onceq token create '*').
//
//	POST   /token/{ns}?description=&read_only=   create a token: 201 {"token": ...}, shown once
//	GET    /token/{ns}                           the namespace's tokens ("*": every one)
//	DELETE /token/{ns}/{id}                      revoke one: 204
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token/{ns}", s.admin(s.createToken))
	mux.HandleFunc("GET /token/{ns}", s.admin(s.listTokens))
	mux.HandleFunc("DELETE /token/{ns}/{id}", s.admin(s.revokeToken))
	mux.HandleFunc("/", s.admin(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, msg: "no admin endpoint " + r.Method + " " + r.URL.Path + ": POST, GET /token/{ns}, DELETE /token/{ns}/{id}"})
	}))
	return mux
}

// admin lets operators' tokens through, with a valid namespace in the
// path.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, err := s.tokens.Check(tokenOf(r))
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
	q := r.URL.Query()
	if err := allowParams(q, "description", "read_only"); err != nil {
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
	id := r.PathValue("id")
	if !auth.ValidID(id) {
		writeError(w, badRequest("id", "%q: want the 16 hex digits of a token's ID", id))
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
