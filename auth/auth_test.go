package auth

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// startStores starts a broker and returns a context for the test's calls,
// its connection, and open, which opens a Store on it, closed when the
// test ends.
func startStores(t *testing.T) (context.Context, broker.Conn, func() *Store) {
	t.Helper()
	_, conn := testutil.StartBroker(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, conn, func() *Store {
		t.Helper()
		s, err := Open(ctx, conn, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
}

// TestTokens: a created token checks on its store and on another one
// opened later; a wrong secret, a malformed token and a revoked one do
// not; List and Allows say what a token opens.
func TestTokens(t *testing.T) {
	ctx, conn, open := startStores(t)
	log := slog.New(slog.DiscardHandler)
	s := open()
	tok, info, err := s.Create(ctx, "shop", false, "checkout service")
	if err != nil {
		t.Fatal(err)
	}
	ro, _, err := s.Create(ctx, AllNamespaces, true, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Check(tok)
	if err != nil || got != info || !got.Allows("shop") || got.Allows("other") {
		t.Fatalf("Check of a new token: %+v, %v; want %+v, opening shop only", got, err, info)
	}
	if got, err := s.Check(ro); err != nil || !got.ReadOnly || !got.Allows("any") {
		t.Fatalf("Check of a read-only operator token: %+v, %v", got, err)
	}
	wrong := tok[:len(tok)-1] + map[bool]string{true: "A", false: "B"}[tok[len(tok)-1] != 'A']
	for _, bad := range []string{wrong, "oq_", "Bearer " + tok, tok + "x", strings.ToUpper(tok)} {
		if _, err := s.Check(bad); !errors.Is(err, ErrBadToken) {
			t.Errorf("Check(%q) = %v; want ErrBadToken", bad, err)
		}
	}
	if _, err := s.Check(""); !errors.Is(err, ErrNoToken) {
		t.Errorf("Check of no token: %v", err)
	}

	other, err := Open(ctx, conn, log)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if got, err := other.Check(tok); err != nil || got != info {
		t.Fatalf("another store: %+v, %v", got, err)
	}
	if l := other.List("shop"); len(l) != 1 || l[0] != info {
		t.Fatalf("List(shop) = %+v", l)
	}
	if l := other.List(""); len(l) != 2 || l[0].Namespace != AllNamespaces {
		t.Fatalf("List() = %+v", l)
	}
	if err := other.Revoke(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Check(tok); !errors.Is(err, ErrBadToken) {
		t.Fatalf("a revoked token on the store that revoked it: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Check(tok); errors.Is(err, ErrBadToken) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first store still accepts the revoked token after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Revoke(ctx, info.ID); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("revoke of a revoked token: %v", err)
	}
	for _, ns := range []string{"", "a.b", "onceq-x", strings.Repeat("n", 65), "sp ace"} {
		if _, _, err := s.Create(ctx, ns, false, ""); err == nil {
			t.Errorf("Create(%q) accepted", ns)
		}
	}
}

// FuzzDecode: decode never panics, and what it accepts has a valid ID,
// namespace and limit.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), []byte(`{"v":1,"ns":"shop","created":1700000000000,"sha256":"`+strings.Repeat("ab", 32)+`"}`))
	f.Add([]byte("0123456789abcdef"), []byte(`{"v":1,"ns":"shop","created":1700000000000,"sha256":"`+strings.Repeat("ab", 32)+`","limit":{"read":0,"write":5,"interval":10},"updated":1700000001000}`))
	f.Add([]byte("0123456789abcdef"), []byte(`{"v":1,"ns":"shop","created":1,"sha256":"`+strings.Repeat("ab", 32)+`","limit":{"read":-1,"write":5,"interval":0},"updated":-1}`))
	f.Add([]byte("0123456789abcdef"), []byte(nil))
	f.Add([]byte("x"), []byte(`{}`))
	f.Fuzz(func(t *testing.T, key, val []byte) {
		tok, _, err := decode(key, val)
		if err != nil {
			return
		}
		if !ValidID(tok.ID) {
			t.Fatalf("accepted ID %q", tok.ID)
		}
		if val != nil && ValidateNamespace(tok.Namespace) != nil {
			t.Fatalf("accepted namespace %q", tok.Namespace)
		}
		if tok.Limit != nil && tok.Limit.Validate() != nil {
			t.Fatalf("accepted limit %+v: %v", *tok.Limit, tok.Limit.Validate())
		}
	})
}
