package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// eventually waits up to 10 s for ok, and fails the test naming what.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
	}
}

// TestSetLimit: a limit set on a token is in its record, seen by another
// store, and the token keeps its secret, namespace, access and
// description; nil lifts it; an invalid limit, an unknown ID and a
// revoked one are refused, nothing written.
func TestSetLimit(t *testing.T) {
	ctx, conn, open := startStores(t)
	log := slog.New(slog.DiscardHandler)
	s := open()
	tok, info, err := s.Create(ctx, "shop", true, "reports")
	if err != nil {
		t.Fatal(err)
	}
	l := &Limit{Read: 10, Write: 0, Interval: 60}
	if err := s.SetLimit(ctx, info.ID, l); err != nil {
		t.Fatal(err)
	}
	l.Read = 99 // the caller's copy is not the store's
	got, err := s.Check(tok)
	if err != nil || got.Limit == nil || *got.Limit != (Limit{10, 0, 60}) || got.Updated.IsZero() ||
		got.Namespace != "shop" || !got.ReadOnly || got.Description != "reports" || !got.Created.Equal(info.Created) {
		t.Fatalf("Check after SetLimit: %+v (limit %+v), %v; want %+v with read 10, interval 60", got, got.Limit, err, info)
	}
	other, err := Open(ctx, conn, log)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if got, err := other.Check(tok); err != nil || got.Limit == nil || *got.Limit != (Limit{10, 0, 60}) {
		t.Fatalf("another store: %+v, %v", got, err)
	}
	if err := s.SetLimit(ctx, info.ID, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other store sees the limit lifted", func() bool {
		got, err := other.Check(tok)
		return err == nil && got.Limit == nil
	})

	for _, tc := range []struct {
		l     Limit
		field string
	}{
		{Limit{-1, 5, 10}, "read"}, {Limit{5, -1, 10}, "write"}, {Limit{0, 0, 10}, "read"},
		{Limit{5, 5, 0}, "interval"}, {Limit{5, 5, MaxLimitInterval + 1}, "interval"}, {Limit{MaxLimitCount + 1, 0, 1}, "read"},
	} {
		err := s.SetLimit(ctx, info.ID, &tc.l)
		var le *LimitError
		if !errors.As(err, &le) || le.Field != tc.field || !strings.Contains(err.Error(), "want") {
			t.Errorf("SetLimit(%+v): %v; want a LimitError of %s saying what to want", tc.l, err, tc.field)
		}
	}
	if got, err := s.Check(tok); err != nil || got.Limit != nil {
		t.Errorf("after the refused limits: %+v, %v; want no limit", got, err)
	}
	if err := s.SetLimit(ctx, "0123456789abcdef", &Limit{1, 1, 1}); !errors.Is(err, ErrUnknownID) {
		t.Errorf("SetLimit of an unknown ID: %v", err)
	}
	if err := s.Revoke(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLimit(ctx, info.ID, &Limit{1, 1, 1}); !errors.Is(err, ErrUnknownID) {
		t.Errorf("SetLimit of a revoked ID: %v", err)
	}
	if _, err := s.Check(tok); !errors.Is(err, ErrBadToken) {
		t.Errorf("the revoked token after a refused SetLimit: %v", err)
	}
}

// record is the token record of id, as Create and SetLimit write it.
func record(id string, updated int64, limit string) *kgo.Record {
	val := `{"v":1,"ns":"shop","created":1700000000000,"sha256":"` + strings.Repeat("ab", 32) + `"`
	if updated != 0 {
		val += fmt.Sprintf(`,"updated":%d`, updated)
	}
	if limit != "" {
		val += `,"limit":` + limit
	}
	return &kgo.Record{Key: []byte(id), Value: []byte(val + "}")}
}

// TestRewriteOfRevokedToken: a rewrite (SetLimit's record) of a token
// revoked before it in the topic is not applied, where a token's first
// record, or a rewrite whose earlier records compaction removed, is.
func TestRewriteOfRevokedToken(t *testing.T) {
	const id, other = "0123456789abcdef", "fedcba9876543210"
	s := newStore(broker.Conn{}, slog.New(slog.DiscardHandler))
	for i, rec := range []*kgo.Record{
		record(id, 0, ""), {Key: []byte(id)}, record(id, 1700000001000, `{"read":1,"write":0,"interval":1}`),
		record(other, 1700000001000, `{"read":0,"write":2,"interval":5}`),
	} {
		rec.Offset = int64(i)
		s.apply(rec)
	}
	if _, ok := s.Lookup(id); ok {
		t.Errorf("a rewrite after a revoke brought the token back")
	}
	if tok, ok := s.Lookup(other); !ok || tok.Limit == nil || *tok.Limit != (Limit{0, 2, 5}) {
		t.Errorf("a rewrite alone in the topic: %+v, %v; want it with its limit", tok, ok)
	}
}

// TestDecodeRecords: a record an older server wrote (no limit) and one
// with a limit decode; an invalid limit is refused.
func TestDecodeRecords(t *testing.T) {
	const id = "0123456789abcdef"
	old := record(id, 0, "")
	tok, _, err := decode(old.Key, old.Value)
	if err != nil || tok.Limit != nil || !tok.Updated.IsZero() || tok.Namespace != "shop" {
		t.Errorf("an older server's record: %+v, %v", tok, err)
	}
	rec := record(id, 1700000001000, `{"read":0,"write":200,"interval":10}`)
	tok, _, err = decode(rec.Key, rec.Value)
	if err != nil || tok.Limit == nil || *tok.Limit != (Limit{0, 200, 10}) || tok.Updated.UnixMilli() != 1700000001000 {
		t.Errorf("a record with a limit: %+v, %v", tok, err)
	}
	for _, l := range []string{`{"read":0,"write":0,"interval":10}`, `{"read":1,"write":1,"interval":0}`, `{"read":-1,"write":1,"interval":1}`, `"x"`} {
		rec := record(id, 1, l)
		if _, _, err := decode(rec.Key, rec.Value); err == nil {
			t.Errorf("a record with limit %s decoded", l)
		}
	}
}

// TestUsageReports: a server's usage report reaches the other stores,
// which sum the reports of a window and leave out the asking server's
// own; a tombstone forgets one; SweepUsage forgets those whose window
// ended long ago.
func TestUsageReports(t *testing.T) {
	ctx, _, open := startStores(t)
	a, b := open(), open()
	const id = "0123456789abcdef"
	now := time.Now().Unix()
	a.ReportUsage(Usage{Token: id, Kind: UsageWrite, Server: "a", Interval: 10, Window: now / 10, Count: 3})
	a.ReportUsage(Usage{Token: id, Kind: UsageWrite, Server: "c", Interval: 10, Window: now / 10, Count: 2})
	a.ReportUsage(Usage{Token: id, Kind: UsageWrite, Server: "old", Interval: 10, Window: now/10 - 100, Count: 7})
	a.ReportUsage(Usage{Token: id, Kind: UsageRead, Server: "a", Interval: 10, Window: now / 10, Count: 4})
	if err := a.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b sums a's and c's writes", func() bool { return b.Usage(id, UsageWrite, 10, now/10, "b") == 5 })
	if n := b.Usage(id, UsageWrite, 10, now/10, "a"); n != 2 {
		t.Errorf("the others' writes, as a asks: %d; want c's 2", n)
	}
	if n := b.Usage(id, UsageWrite, 20, now/20, "b"); n != 0 {
		t.Errorf("the writes of another interval: %d; want 0", n)
	}
	if n := b.Usage(id, UsageRead, 10, now/10, "b"); n != 4 {
		t.Errorf("the reads: %d; want 4", n)
	}
	a.ForgetUsage(id, UsageWrite, "c")
	eventually(t, "b forgets c's report", func() bool { return b.Usage(id, UsageWrite, 10, now/10, "b") == 3 })
	if n := b.SweepUsage(time.Now().Add(-time.Minute)); n != 1 {
		t.Errorf("SweepUsage: %d; want the one report whose window ended 1000 s ago", n)
	}
	eventually(t, "a forgets the stale report", func() bool {
		a.mu.RLock()
		defer a.mu.RUnlock()
		_, ok := a.usage[usageOf{id, UsageWrite}]["old"]
		return !ok
	})
}

// FuzzDecodeUsage: decodeUsage never panics, and what it accepts has a
// token ID, a kind, a server name, and a window and count in bounds.
func FuzzDecodeUsage(f *testing.F) {
	f.Add([]byte("usage/0123456789abcdef/w/ABC123"), []byte(`{"v":1,"window":170000000,"interval":10,"count":3}`))
	f.Add([]byte("usage/0123456789abcdef/r/x"), []byte(nil))
	f.Add([]byte("usage/0123456789abcdef/x/a/b"), []byte(`{}`))
	f.Add([]byte("usage/0123456789abcdef/w/a"), []byte(`{"v":1,"window":-1,"interval":0,"count":1e99}`))
	f.Fuzz(func(t *testing.T, key, val []byte) {
		u, err := decodeUsage(key, val)
		if err != nil {
			return
		}
		if !ValidID(u.Token) || u.Kind != UsageRead && u.Kind != UsageWrite || !validServer(u.Server) || string(u.key()) != string(key) {
			t.Fatalf("accepted key %q as %+v", key, u)
		}
		if val != nil && (u.Interval < 1 || u.Interval > MaxLimitInterval || u.Window < 0 || u.Count < 0 || u.Count > MaxLimitCount) {
			t.Fatalf("accepted %s as %+v", val, u)
		}
		if val != nil {
			again, err := json.Marshal(usageValue{V: 1, Window: u.Window, Interval: u.Interval, Count: u.Count})
			if v, err2 := decodeUsage(key, again); err != nil || err2 != nil || v != u {
				t.Fatalf("%+v does not round-trip: %v %v %+v", u, err, err2, v)
			}
		}
	})
}
