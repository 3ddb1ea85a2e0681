// Package auth is onceq's token store: the tokens that open onceq serve's
// HTTP API and console, each for one namespace (or every one), read-write
// or read-only.
//
// A token is printed once, when it is created: oq_<id>_<secret>. The store
// keeps its SHA-256 hash, never the secret, in the compacted topic
// onceq-tokens, keyed by the token's ID; a revoke is a tombstone. Every
// server reads the topic to its end when it starts and follows it, so a
// token created or revoked on one is seen by all within a fetch.
package auth

import (
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
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("namespace %q: byte %d is %q: want letters, digits, '_' or '-'", ns, i, c)
		}
	}
	if strings.HasPrefix(ns, "onceq-") || strings.HasPrefix(ns, "__") {
		return fmt.Errorf("namespace %q: names starting with \"onceq-\" or \"__\" are reserved", ns)
	}
	return nil
}

// stored is a token's record in the topic.
type stored struct {
	V           int    `json:"v"`
	Namespace   string `json:"ns"`
	ReadOnly    bool   `json:"ro,omitempty"`
	Description string `json:"desc,omitempty"`
	Created     int64  `json:"created"`
	Hash        string `json:"sha256"` // of the secret, hex
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
	if s.V != 1 || err != nil || len(h) != len(hash) || ValidateNamespace(s.Namespace) != nil || s.Created < 0 || s.Created > onceq.MaxUnixMilli {
		return Token{}, hash, fmt.Errorf("auth: token %s: want version 1, a namespace, a time and a SHA-256 hash", id)
	}
	copy(hash[:], h)
	return Token{ID: id, Namespace: s.Namespace, ReadOnly: s.ReadOnly, Description: s.Description, Created: time.UnixMilli(s.Created)}, hash, nil
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

	mu       sync.RWMutex
	tokens   map[string]entry // by ID
	progress table.Progress   // how far the topic was applied
}

// Open reads the token store (creating its topic if needed) and follows it.
func Open(ctx context.Context, conn broker.Conn, log *slog.Logger) (*Store, error) {
	s := &Store{conn: conn, log: log, tokens: map[string]entry{}}
	f, err := table.Follow(ctx, conn, Topic, log, s.apply)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	s.f = f
	return s, nil
}

// Close stops following the store.
func (s *Store) Close() { s.f.Close() }

func (s *Store) apply(rec *kgo.Record) {
	defer s.progress.Applied(rec)
	tok, hash, err := decode(rec.Key, rec.Value)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.log.Warn("token record skipped", "offset", rec.Offset, "err", err)
		return
	}
	if rec.Value == nil {
		delete(s.tokens, tok.ID)
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
	val, err := json.Marshal(stored{V: 1, Namespace: ns, ReadOnly: readOnly, Description: description, Created: now.UnixMilli(), Hash: hex.EncodeToString(h[:])})
	if err != nil {
		return "", Token{}, err
	}
	if err := s.write(ctx, &kgo.Record{Topic: Topic, Key: []byte(id), Value: val}); err != nil {
		return "", Token{}, err
	}
	return tokenPrefix + id + "_" + secret, Token{ID: id, Namespace: ns, ReadOnly: readOnly, Description: description, Created: now}, nil
}

// ErrUnknownID is returned by Revoke for an ID the store does not hold.
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
