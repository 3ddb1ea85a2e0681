// Package auth is onceq's token store: the tokens that open onceq serve's
// HTTP API and console, each for one namespace (or every one), read-write
// or read-only.
//
// A token is printed once, when it is created: oq_<id>_<secret>. The store
// keeps its SHA-256 hash, never the secret, in the compacted topic
// onceq-tokens, keyed by the token's ID; a revoke is a tombstone. Every
// server reads the topic to its end when it starts and follows it, so a
// token created or revoked on one is seen by all within a fetch.
//
// A token's record also holds its limit, lmstfy's throttler's (SetLimit):
// how many consumes and publishes it may make in each interval. The
// servers that count them report their counts in the same topic, under
// keys of their own (usage/<id>/<r|w>/<server>: Usage), so that every
// server knows what the others admitted.
package auth

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/table"
)

// Topic is the token store's topic.
const Topic = broker.TokensTopic

// AllNamespaces is the namespace of a token that opens every namespace:
// an operator's.
const AllNamespaces = "*"

// MaxNamespaceLen bounds a namespace's name.
const MaxNamespaceLen = 64

// Errors of Check.
var (
	ErrNoToken  = errors.New("no token: send it as the X-Token header or as Authorization: Bearer <token>")
	ErrBadToken = errors.New("token not recognized: it is malformed, revoked, or was never created (onceq token create NS)")
)

// A Token is what the store knows of a token: never its secret.
type Token struct {
	ID          string    `json:"id"`
	Namespace   string    `json:"namespace"`
	ReadOnly    bool      `json:"read_only"`
	Description string    `json:"description,omitempty"`
	Created     time.Time `json:"created"`
	// Limit is the token's limit, nil for none. It is shared by every
	// copy of the Token: do not modify it.
	Limit *Limit `json:"limit,omitempty"`
	// Updated is when the token's limit was last set or lifted, zero if
	// never.
	Updated time.Time `json:"updated,omitzero"`
}

// Allows reports whether the token opens namespace ns.
func (t Token) Allows(ns string) bool { return t.Namespace == AllNamespaces || t.Namespace == ns }

// ValidateNamespace checks a namespace's name: 1 to MaxNamespaceLen
// letters, digits, '_' or '-' (no '.', which separates the namespace from
// the queue in a topic's name), or AllNamespaces.
func ValidateNamespace(ns string) error {
	if ns == AllNamespaces {
		return nil
	}
	if ns == "" || len(ns) > MaxNamespaceLen {
		return fmt.Errorf("namespace %q: want 1 to %d letters, digits, '_' or '-'", ns, MaxNamespaceLen)
	}
	if i := badNameByte(ns); i >= 0 {
		return fmt.Errorf("namespace %q: byte %d is %q: want letters, digits, '_' or '-'", ns, i, ns[i])
	}
	if strings.HasPrefix(ns, "onceq-") || strings.HasPrefix(ns, "__") {
		return fmt.Errorf("namespace %q: names starting with \"onceq-\" or \"__\" are reserved", ns)
	}
	return nil
}

// badNameByte returns the index of the first byte of name that is not a
// letter, a digit, '_' or '-', or -1: the bytes of a namespace's name and
// of a server's in a usage report.
func badNameByte(name string) int {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return i
		}
	}
	return -1
}

// stored is a token's record in the topic.
type stored struct {
	V           int    `json:"v"`
	Namespace   string `json:"ns"`
	ReadOnly    bool   `json:"ro,omitempty"`
	Description string `json:"desc,omitempty"`
	Created     int64  `json:"created"`
	Hash        string `json:"sha256"` // of the secret, hex
	Limit       *Limit `json:"limit,omitempty"`
	// Updated is when a record that rewrites an existing token's was
	// written (SetLimit), in Unix milliseconds; 0 for the record Create
	// writes. A rewrite never brings back a token revoked before it in
	// the topic (apply).
	Updated int64 `json:"updated,omitempty"`
}

// stored is the record of e's token.
func (e entry) stored() stored {
	s := stored{V: 1, Namespace: e.tok.Namespace, ReadOnly: e.tok.ReadOnly, Description: e.tok.Description,
		Created: e.tok.Created.UnixMilli(), Hash: hex.EncodeToString(e.hash[:]), Limit: e.tok.Limit}
	if !e.tok.Updated.IsZero() {
		s.Updated = e.tok.Updated.UnixMilli()
	}
	return s
}

// decode reads a token record; a nil value is a revoke.
func decode(key, val []byte) (Token, [32]byte, error) {
	var hash [32]byte
	id := string(key)
	if !ValidID(id) {
		return Token{}, hash, fmt.Errorf("auth: key %q is no token ID", id)
	}
	if val == nil {
		return Token{ID: id}, hash, nil
	}
	var s stored
	if err := json.Unmarshal(val, &s); err != nil {
		return Token{}, hash, fmt.Errorf("auth: token %s: %w", id, err)
	}
	h, err := hex.DecodeString(s.Hash)
	if s.V != 1 || err != nil || len(h) != len(hash) || ValidateNamespace(s.Namespace) != nil || s.Created < 0 || s.Created > onceq.MaxUnixMilli ||
		s.Updated < 0 || s.Updated > onceq.MaxUnixMilli {
		return Token{}, hash, fmt.Errorf("auth: token %s: want version 1, a namespace, a time and a SHA-256 hash", id)
	}
	if s.Limit != nil {
		if err := s.Limit.Validate(); err != nil {
			return Token{}, hash, fmt.Errorf("auth: token %s: %w", id, err)
		}
	}
	copy(hash[:], h)
	tok := Token{ID: id, Namespace: s.Namespace, ReadOnly: s.ReadOnly, Description: s.Description, Created: time.UnixMilli(s.Created), Limit: s.Limit}
	if s.Updated != 0 {
		tok.Updated = time.UnixMilli(s.Updated)
	}
	return tok, hash, nil
}

// A token's parts: oq_<id: 16 hex>_<secret: 32 base64url>.
const (
	tokenPrefix = "oq_"
	idLen       = 16
	secretBytes = 24
)

var secretLen = base64.RawURLEncoding.EncodedLen(secretBytes)

// ValidID reports whether id is a token ID: the 16 hex digits after
// "oq_".
func ValidID(id string) bool {
	if len(id) != idLen {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// parse splits a token into its ID and secret.
func parse(tok string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok || len(rest) != idLen+1+secretLen || rest[idLen] != '_' {
		return "", "", false
	}
	id, secret = rest[:idLen], rest[idLen+1:]
	return id, secret, ValidID(id)
}

type entry struct {
	tok  Token
	hash [32]byte
}

// Store is the token store. It is safe for concurrent use.
type Store struct {
	conn broker.Conn
	log  *slog.Logger
	f    *table.Follower

	mu     sync.RWMutex
	tokens map[string]entry // by ID
	// revoked are the IDs whose tombstones were applied: a rewrite of
	// one of them (a SetLimit that raced the revoke) is not applied.
	revoked  map[string]bool
	usage    map[usageOf]map[string]Usage // by server
	progress table.Progress               // how far the topic was applied
	// reportFailing is set while usage reports fail, so that a broker
	// that is down is logged once, not at every report.
	reportFailing atomic.Bool
}

// Open reads the token store (creating its topic if needed) and follows it.
func Open(ctx context.Context, conn broker.Conn, log *slog.Logger) (*Store, error) {
	s := newStore(conn, log)
	f, err := table.Follow(ctx, conn, Topic, log, s.apply)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	s.f = f
	return s, nil
}

// newStore is a store that holds nothing yet, to apply the topic to.
func newStore(conn broker.Conn, log *slog.Logger) *Store {
	return &Store{conn: conn, log: log, tokens: map[string]entry{}, revoked: map[string]bool{}, usage: map[usageOf]map[string]Usage{}}
}

// Close stops following the store.
func (s *Store) Close() { s.f.Close() }

func (s *Store) apply(rec *kgo.Record) {
	defer s.progress.Applied(rec)
	if bytes.HasPrefix(rec.Key, []byte(usagePrefix)) {
		s.applyUsage(rec)
		return
	}
	tok, hash, err := decode(rec.Key, rec.Value)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.log.Warn("token record skipped", "offset", rec.Offset, "err", err)
		return
	}
	if rec.Value == nil {
		delete(s.tokens, tok.ID)
		s.revoked[tok.ID] = true
		return
	}
	if s.revoked[tok.ID] && !tok.Updated.IsZero() {
		s.log.Info("a limit set on a token revoked meanwhile is not applied", "id", tok.ID, "offset", rec.Offset)
		return
	}
	s.tokens[tok.ID] = entry{tok, hash}
}

// Check returns the token that tok is, or ErrNoToken or ErrBadToken. The
// secret's hash is compared in constant time.
func (s *Store) Check(tok string) (Token, error) {
	if tok == "" {
		return Token{}, ErrNoToken
	}
	id, secret, ok := parse(tok)
	if !ok {
		return Token{}, ErrBadToken
	}
	s.mu.RLock()
	e, found := s.tokens[id]
	s.mu.RUnlock()
	h := sha256.Sum256([]byte(secret))
	if !found || subtle.ConstantTimeCompare(h[:], e.hash[:]) != 1 {
		return Token{}, ErrBadToken
	}
	return e.tok, nil
}

// Sync returns once the store applied every record the topic held when
// Sync was called: a read after it sees every write acknowledged before
// it, by this process or another.
func (s *Store) Sync(ctx context.Context) error {
	if err := s.f.Sync(ctx); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// Lookup returns the token of this ID, if the store holds it.
func (s *Store) Lookup(id string) (Token, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.tokens[id]
	return e.tok, ok
}

// List returns the tokens of namespace ns ("" for all), by namespace and
// creation.
func (s *Store) List(ns string) []Token {
	s.mu.RLock()
	var out []Token
	for _, e := range s.tokens {
		if ns == "" || e.tok.Namespace == ns {
			out = append(out, e.tok)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Token) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Create makes a token for namespace ns and returns it, the only time its
// secret is seen, once the store applied it.
func (s *Store) Create(ctx context.Context, ns string, readOnly bool, description string) (string, Token, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", Token{}, fmt.Errorf("auth: %w", err)
	}
	if len(description) > 256 {
		return "", Token{}, fmt.Errorf("auth: description of %d bytes: at most 256", len(description))
	}
	raw := make([]byte, idLen/2+secretBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", Token{}, err
	}
	id := hex.EncodeToString(raw[:idLen/2])
	secret := base64.RawURLEncoding.EncodeToString(raw[idLen/2:])
	h := sha256.Sum256([]byte(secret))
	now := time.Now().Truncate(time.Millisecond)
	tok := Token{ID: id, Namespace: ns, ReadOnly: readOnly, Description: description, Created: now}
	val, err := json.Marshal(entry{tok, h}.stored())
	if err != nil {
		return "", Token{}, err
	}
	if err := s.write(ctx, &kgo.Record{Topic: Topic, Key: []byte(id), Value: val}); err != nil {
		return "", Token{}, err
	}
	return tokenPrefix + id + "_" + secret, tok, nil
}

// ErrUnknownID is returned by Revoke and SetLimit for an ID the store
// does not hold.
var ErrUnknownID = errors.New("auth: no token has this ID: onceq token list shows them")

// Revoke deletes the token of this ID (the 16 hex digits after "oq_"),
// and returns once the store applied it.
func (s *Store) Revoke(ctx context.Context, id string) error {
	s.mu.RLock()
	_, ok := s.tokens[id]
	s.mu.RUnlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownID, id)
	}
	return s.write(ctx, &kgo.Record{Topic: Topic, Key: []byte(id)})
}

// write writes one record (acks=all) and waits until the store applied
// it.
func (s *Store) write(ctx context.Context, rec *kgo.Record) error {
	cl, err := s.conn.NewClient(kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := s.progress.Write(ctx, cl, rec); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}
