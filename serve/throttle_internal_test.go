package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq/auth"
)

// memUsage is a usage table in memory, for the throttle's rules without
// a broker: the reports as the token store keeps them, and what was
// written.
type memUsage struct {
	mu      sync.Mutex
	reports map[string]auth.Usage // by token/kind/server
	written []string              // "report <kind> <count>@<window>", "forget <kind>"
}

func (m *memUsage) Usage(id string, kind auth.UsageKind, interval, window int64, except string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, u := range m.reports {
		if u.Token == id && u.Kind == kind && u.Server != except && u.Interval == interval && u.Window == window {
			n += u.Count
		}
	}
	return n
}

func (m *memUsage) ReportUsage(u auth.Usage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reports[fmt.Sprintf("%s/%c/%s", u.Token, u.Kind, u.Server)] = u
	m.written = append(m.written, fmt.Sprintf("report %c %d@%d", u.Kind, u.Count, u.Window))
}

func (m *memUsage) ForgetUsage(id string, kind auth.UsageKind, server string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.reports, fmt.Sprintf("%s/%c/%s", id, kind, server))
	m.written = append(m.written, fmt.Sprintf("forget %c", kind))
}

func (m *memUsage) SweepUsage(time.Time) int             { return 0 }
func (m *memUsage) FlushUsage(ctx context.Context) error { return nil }

// drain returns what was written since the last drain.
func (m *memUsage) drain() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := strings.Join(m.written, ", ")
	m.written = nil
	return s
}

// TestThrottleRules: one server's counting, on a clock of its own: the
// limit's count passes in a window and the next request is refused with
// the time to the window's end; a request that failed gives its count
// back, but not into a later window; the other servers' reports of the
// same window count, of another window not; a limit of 0 and other
// routes count nothing; the reports are written when counts change, and
// forgotten once their window passed.
func TestThrottleRules(t *testing.T) {
	table := &memUsage{reports: map[string]auth.Usage{}}
	th := newThrottle(table, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refused"}, []string{"route"}))
	now := time.Unix(10_002, 0) // window 1000 of 10 s, 8 s left
	th.now = func() time.Time { return now }
	tok := auth.Token{ID: "0123456789abcdef", Limit: &auth.Limit{Read: 0, Write: 3, Interval: 10}}

	var dones []func(int)
	for i := range 3 {
		done, err := th.take(tok, "publish")
		if err != nil {
			t.Fatalf("publish %d of 3: %v", i+1, err)
		}
		dones = append(dones, done)
	}
	_, err := th.take(tok, "bulk_lmstfy")
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != 429 || ae.retryAfter != 8*time.Second ||
		ae.lmstfyMsg != "token(0123456789abcdef) produce reach the limit rate, please retry later" || !strings.Contains(ae.msg, "3 publishes every 10 s") {
		t.Fatalf("the 4th publish: %#v; want a 429 retrying after 8s with lmstfy's message", err)
	}
	for _, route := range []string{"consume", "peek", "bulk"} {
		if done, err := th.take(tok, route); err != nil {
			t.Errorf("%s under a limit of writes alone: %v", route, err)
		} else {
			done(500)
		}
	}
	if got := table.drain(); got != "" {
		t.Errorf("written before a report: %q", got)
	}
	if th.report(now); table.drain() != "report w 3@1000" {
		t.Errorf("the first report: want report w 3@1000")
	}

	dones[0](400) // a publish refused: its count comes back
	dones[1](201)
	if _, err := th.take(tok, "publish"); err != nil {
		t.Fatalf("a publish after one failed: %v", err)
	}
	if th.report(now); table.drain() != "report w 3@1000" {
		t.Errorf("a count given back and taken again: want it written again")
	}
	if th.report(now); table.drain() != "" {
		t.Errorf("a report of an unchanged count: want none")
	}
	table.ReportUsage(auth.Usage{Token: tok.ID, Kind: auth.UsageWrite, Server: "other", Interval: 10, Window: 999, Count: 3})
	if th.used(tok, auth.UsageWrite) != 3 {
		t.Errorf("used with another server's report of an earlier window: %d; want 3", th.used(tok, auth.UsageWrite))
	}

	now = now.Add(8 * time.Second) // window 1001
	table.ReportUsage(auth.Usage{Token: tok.ID, Kind: auth.UsageWrite, Server: "other", Interval: 10, Window: 1001, Count: 2})
	table.drain()
	if _, err := th.take(tok, "publish"); err != nil {
		t.Fatalf("a publish in the next window: %v", err)
	}
	dones[2](400) // of window 1000: nothing to give back in 1001
	if _, err := th.take(tok, "publish"); err == nil {
		t.Fatalf("a 4th publish of window 1001 (1 here, 2 reported by another server): passed")
	}
	if th.report(now); table.drain() != "report w 1@1001" {
		t.Errorf("the report of window 1001: want report w 1@1001")
	}
	now = now.Add(10 * time.Second)
	if busy := th.report(now); busy || table.drain() != "forget w" {
		t.Errorf("a report whose window passed: busy %v; want it forgotten", busy)
	}
}

// FuzzReadLimit: any body of a limit's POST is a valid limit or a 4xx
// naming what is wrong.
func FuzzReadLimit(f *testing.F) {
	for _, seed := range []string{`{"read":1,"write":2,"interval":3}`, `{"read":-1}`, `{"burst":1}`, `{"read":1.5}`, ``, `null`,
		`[1]`, `{"read":1,"write":1,"interval":1}{}`, `{"read":99999999999999999999}`, `{"interval":"10"}`, strings.Repeat(" ", maxLimitBody+1)} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/token/shop/x/limit", strings.NewReader(string(body)))
		l, err := readLimit(httptest.NewRecorder(), r)
		answered(t, err)
		var ae *apiError
		if errors.As(err, &ae) && (ae.field == "" || ae.msg == "") {
			t.Fatalf("%q: %#v names no field", body, ae)
		}
		if err == nil && l.Validate() != nil {
			t.Fatalf("%q: accepted %+v: %v", body, l, l.Validate())
		}
	})
}
