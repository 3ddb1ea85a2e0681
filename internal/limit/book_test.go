package limit

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in    string
		count int
		per   time.Duration
		err   string
	}{
		{"10/s", 10, time.Second, ""},
		{"600/m", 600, time.Minute, ""},
		{"2/h", 2, time.Hour, ""},
		{"5/250ms", 5, 250 * time.Millisecond, ""},
		{"10", 0, 0, "want <count>/<unit>"},
		{"0/s", 0, 0, "from 1 to"},
		{"x/s", 0, 0, "from 1 to"},
		{"10/fortnight", 0, 0, "want s, m, h or a duration"},
		{"10/1ms", 0, 0, "want 10ms to 24h0m0s"},
		{"10/48h", 0, 0, "want 10ms to 24h0m0s"},
	} {
		c, p, err := ParseRate(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v; want an error saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || c != tc.count || p != tc.per {
			t.Errorf("%q: %d/%v, %v; want %d/%v", tc.in, c, p, err, tc.count, tc.per)
		}
		if got := (Limit{Count: c, Per: p}).Rate(); got != tc.in {
			t.Errorf("%q written back as %q", tc.in, got)
		}
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	l := Limit{Count: 10, Per: time.Second, Running: 5}
	rec := LimitRecord("emails", l)
	r, err := Decode(rec.Key, rec.Value)
	if err != nil || r.Queue != "emails" || r.Limit != l || r.Claim != nil {
		t.Fatalf("limit: %+v, %v", r, err)
	}
	rec = LimitRecord("emails", Limit{})
	if r, err := Decode(rec.Key, rec.Value); err != nil || rec.Value != nil || !r.Limit.None() {
		t.Fatalf("lifted limit: %+v, %v", r, err)
	}
	c := Claim{Nonce: "n1", At: 1000, Until: 2000}
	rec = ClaimRecord("shop.orders", "h1", c)
	r, err = Decode(rec.Key, rec.Value)
	if err != nil || r.Queue != "shop.orders" || r.Holder != "h1" || r.Nonce != "n1" || *r.Claim != c {
		t.Fatalf("claim: %+v, %v", r, err)
	}
	rec = ForgetRecord("shop.orders", "h1", "n1")
	if r, err := Decode(rec.Key, rec.Value); err != nil || r.Claim != nil || r.Nonce != "n1" {
		t.Fatalf("forgotten claim: %+v, %v", r, err)
	}
	for _, bad := range []struct{ key, val string }{
		{"limit/", `{"v":1,"count":1,"per_ms":1000}`},
		{"limit/q", `{"v":2,"count":1,"per_ms":1000}`},
		{"limit/q", `{"v":1,"count":1,"per_ms":1}`},
		{"limit/q", `{"v":1,"running":-1}`},
		{"claim/q/h", `{"v":1,"at":1,"until":2}`},
		{"claim/q/h/", `{"v":1,"at":1,"until":2}`},
		{"claim/q//n", `{"v":1,"at":1,"until":2}`},
		{"claim/q/h/n", `{"v":2,"at":1,"until":2}`},
		{"claim/q/h/n", `{"v":1,"at":3,"until":2}`},
		{"claim/q/h/n", `{"v":1,"at":0,"until":2}`},
		{"other/q", `{}`},
	} {
		if _, err := Decode([]byte(bad.key), []byte(bad.val)); err == nil {
			t.Errorf("%s %s decoded", bad.key, bad.val)
		}
	}
}

// fold applies a claim to b at ts and reports whether it admitted it.
func fold(b *Book, ts time.Time, q, holder string, c Claim) bool {
	b.Apply(Record{Queue: q, Holder: holder, Nonce: c.Nonce, Claim: &c}, ts)
	ok, decided := b.Admitted(q, holder, c.Nonce)
	if !decided {
		panic("undecided")
	}
	return ok
}

// TestBookRunning: at most Running claims hold at once; a release or the
// end of a claim's Until frees its place.
func TestBookRunning(t *testing.T) {
	b := NewBook()
	t0 := time.UnixMilli(1_000_000)
	b.Apply(Record{Queue: "q", Limit: Limit{Running: 2}}, t0)
	claim := func(n string, at time.Time) Claim {
		return Claim{Nonce: n, At: at.UnixMilli(), Until: at.Add(time.Minute).UnixMilli()}
	}
	if !fold(b, t0, "q", "a", claim("1", t0)) || !fold(b, t0, "q", "b", claim("2", t0)) {
		t.Fatal("the first two claims were refused")
	}
	if fold(b, t0, "q", "c", claim("3", t0)) {
		t.Fatal("a third claim was admitted with two running")
	}
	if next := b.Next("q", t0); !next.After(t0.Add(59 * time.Second)) {
		t.Fatalf("next %v: want the end of a claim", next.Sub(t0))
	}
	b.Apply(Record{Queue: "q", Holder: "a", Nonce: "1", Claim: &Claim{Nonce: "1", At: t0.UnixMilli(), Until: t0.Add(time.Minute).UnixMilli(), Released: true}}, t0)
	if !fold(b, t0, "q", "c", claim("4", t0)) {
		t.Fatal("a claim was refused after a release")
	}
	// b's claim ends at its Until: a claim past it is admitted.
	late := t0.Add(time.Minute + time.Millisecond)
	if fold(b, t0.Add(time.Second), "q", "d", claim("5", t0)) {
		t.Fatal("admitted while two run")
	}
	if !fold(b, late, "q", "d", claim("6", late)) {
		t.Fatal("refused after the claims' Until")
	}
}

// TestBookRateRandom: whatever the claims, in whatever order, and with
// some withdrawn, the starts admitted and not withdrawn hold at most Count
// in any window of Per+Margin, and Next never names a start the book
// refuses.
func TestBookRateRandom(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		b := NewBook()
		t0 := time.UnixMilli(10_000_000)
		l := Limit{Count: 1 + r.IntN(12), Per: time.Duration(50+r.IntN(1000)) * time.Millisecond}
		b.Apply(Record{Queue: "q", Limit: l}, t0)
		var admitted []Claim
		withdrawn := 0
		now := t0
		for i := range 400 {
			now = now.Add(time.Duration(r.IntN(40)) * time.Millisecond)
			at := now.Add(time.Duration(r.IntN(200)-20) * time.Millisecond)
			if r.IntN(3) == 0 {
				at = b.Next("q", at)
				if !b.queues["q"].fits(at.UnixMilli()) {
					t.Fatalf("seed %d: Next named %v, which the book refuses (limit %v)", seed, at.Sub(t0), l)
				}
			}
			c := Claim{Nonce: itoaTest(i), At: at.UnixMilli(), Until: at.Add(time.Second).UnixMilli()}
			if fold(b, now, "q", "h", c) {
				admitted = append(admitted, c)
			}
			// Now and then a claim admitted is withdrawn, its task never
			// started: its start leaves the windows.
			if len(admitted) > 0 && r.IntN(6) == 0 {
				k := r.IntN(len(admitted))
				w := admitted[k]
				w.Released, w.Withdrawn = true, true
				b.Apply(Record{Queue: "q", Holder: "h", Nonce: w.Nonce, Claim: &w}, now)
				admitted = slices.Delete(admitted, k, k+1)
				withdrawn++
			}
		}
		var starts []int64
		for _, c := range admitted {
			starts = append(starts, c.At)
		}
		if len(starts) < l.Count || withdrawn == 0 {
			t.Fatalf("seed %d: only %d starts admitted, %d withdrawn", seed, len(starts), withdrawn)
		}
		slices.Sort(starts)
		w := (l.Per + Margin).Milliseconds()
		for i := 0; i+l.Count < len(starts); i++ {
			if starts[i+l.Count]-starts[i] < w {
				t.Fatalf("seed %d: %d starts within %dms: %v", seed, l.Count+1, w, starts[i:i+l.Count+1])
			}
		}
	}
}

// TestBookSameOrderSameDecisions: two books folding the same records
// decide alike (what lets every worker decide without a leader).
func TestBookSameOrderSameDecisions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	a, b := NewBook(), NewBook()
	t0 := time.UnixMilli(5_000_000)
	for _, bk := range []*Book{a, b} {
		bk.Apply(Record{Queue: "q", Limit: Limit{Count: 3, Per: 100 * time.Millisecond, Running: 2}}, t0)
	}
	for i := range 500 {
		ts := t0.Add(time.Duration(i) * 7 * time.Millisecond)
		c := Claim{Nonce: itoaTest(i), At: ts.UnixMilli() + int64(r.IntN(50)), Until: ts.UnixMilli() + int64(r.IntN(400))}
		if r.IntN(4) == 0 {
			c.Released = true
		}
		if c.Released && i > 0 {
			c.Nonce = itoaTest(r.IntN(i)) // the release of an earlier claim
		}
		rec := Record{Queue: "q", Holder: "h", Nonce: c.Nonce, Claim: &c}
		if r.IntN(10) == 0 {
			rec.Claim = nil // a tombstone
		}
		a.Apply(rec, ts)
		b.Apply(rec, ts)
		x, _ := a.Admitted("q", "h", c.Nonce)
		y, _ := b.Admitted("q", "h", c.Nonce)
		if x != y {
			t.Fatalf("claim %d decided %v and %v", i, x, y)
		}
	}
}

func itoaTest(i int) string {
	return strings.Repeat("n", 1+i%3) + string(rune('a'+i%26)) + time.Duration(i).String()
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("limit/q"), []byte(`{"v":1,"count":10,"per_ms":1000,"running":5}`))
	f.Add([]byte("claim/q/h/n"), []byte(`{"v":1,"at":1,"until":2,"released":true}`))
	f.Add([]byte("claim/q/h/n"), []byte(nil))
	f.Add([]byte("limit/q"), []byte(nil))
	f.Fuzz(func(t *testing.T, key, val []byte) {
		r, err := Decode(key, val)
		if err != nil {
			return
		}
		rec := LimitRecord(r.Queue, r.Limit)
		switch {
		case r.Claim != nil:
			rec = ClaimRecord(r.Queue, r.Holder, *r.Claim)
		case r.Holder != "":
			rec = ForgetRecord(r.Queue, r.Holder, r.Nonce)
		}
		again, err := Decode(rec.Key, rec.Value)
		if err != nil {
			t.Fatalf("%q %q decoded as %+v, which does not decode again: %v", key, val, r, err)
		}
		if again.Queue != r.Queue || again.Limit != r.Limit || again.Nonce != r.Nonce || (r.Claim != nil && *again.Claim != *r.Claim) {
			t.Fatalf("%+v written back as %+v", r, again)
		}
		b := NewBook()
		b.Apply(r, time.UnixMilli(1))
	})
}
