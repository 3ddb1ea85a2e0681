package serve

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq/auth"
)

// Token limits, lmstfy's throttler: an operator sets a token's limit
// (the admin API's /token/{ns}/{id}/limit, kept in the token's record by
// package auth), the consumes (read) and publishes (write) the token may
// make in each interval of seconds, and a consume or publish past it is
// answered 429, with Retry-After and lmstfy's body. A request that does
// not succeed (a consume not 200, a publish not 201) gives its count
// back, as lmstfy's does.
//
// lmstfy counts in Redis, one counter for its whole fleet. A server here
// counts its own requests in fixed windows (Unix time / interval, as the
// expiry of lmstfy's counter makes them), and refuses a request when its
// count in the window and the counts the other servers last reported
// for the window reach the limit. It reports its count of each token and
// kind as a usage report in the token store's topic (auth.Usage), at
// most every reportEvery and only while it changes, and forgets the
// report once its window passed with nothing new. So a single server is
// exact, and a fleet may admit more than the limit by what the other
// servers admitted within one report interval and the topic's delivery
// (tens of milliseconds): each server alone never admits more than the
// limit in a window. The windows follow the servers' clocks, which must
// agree to well under an interval.

// reportEvery is how often, at most, a server writes its count of a
// token's requests of one kind: the fleet's overrun of a limit is what
// the servers admit in about this long.
const reportEvery = 100 * time.Millisecond

// usageStale is how long past its window's end a usage report lasts
// before any server forgets it: a server that stopped left it, as a
// running one forgets its own within a report interval of the window's
// end. sweepEvery is how often a server looks for them.
const (
	usageStale = time.Minute
	sweepEvery = 30 * time.Second
)

// throttledRoutes are the routes a token's limit counts, lmstfy's: its
// consumes (of one queue or several) as read, its publishes (one job, or
// lmstfy's bulk) as write.
var throttledRoutes = map[string]auth.UsageKind{"consume": auth.UsageRead, "publish": auth.UsageWrite, "bulk_lmstfy": auth.UsageWrite}

// usageTable is what a throttle reads and writes of the servers' counts:
// the token store's usage reports.
type usageTable interface {
	Usage(id string, kind auth.UsageKind, interval, window int64, except string) int64
	ReportUsage(auth.Usage)
	ForgetUsage(id string, kind auth.UsageKind, server string)
	SweepUsage(before time.Time) int
	FlushUsage(ctx context.Context) error
}

var _ usageTable = (*auth.Store)(nil)

// throttle counts this server's requests of the tokens that have a
// limit, and reports the counts (run). It is safe for concurrent use.
type throttle struct {
	table   usageTable
	self    string // this server, in its usage reports
	now     func() time.Time
	refused *prometheus.CounterVec // by route

	mu   sync.Mutex
	own  map[countKey]*count
	kick chan struct{} // a count changed
	quit chan struct{}
	done chan struct{}
}

// countKey is what a server counts by: a token and a kind of request.
type countKey struct {
	id   string
	kind auth.UsageKind
}

// count is a server's count of a token's requests of one kind in one
// window.
type count struct {
	interval, window, n int64
	reported            bool // n is written
	written             bool // the key's report is in the topic, not forgotten
}

func newThrottle(table usageTable, refused *prometheus.CounterVec) *throttle {
	return &throttle{table: table, self: rand.Text()[:12], now: time.Now, refused: refused,
		own: map[countKey]*count{}, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// noCount is take's done of a request no limit counts.
func noCount(int) {}

// take counts a request of route by tok against tok's limit. It returns
// done, to call with the request's status once it is answered: a request
// that did not succeed gives its count back. Or it returns a 429 when the
// token's requests of the route's kind in the current window, this
// server's and what the others reported, reached the limit.
func (t *throttle) take(tok auth.Token, route string) (done func(status int), err error) {
	kind, ok := throttledRoutes[route]
	if !ok || tok.Limit == nil || tok.Limit.Of(kind) == 0 {
		return noCount, nil
	}
	limit, interval := tok.Limit.Of(kind), tok.Limit.Interval
	now := t.now()
	window := now.Unix() / interval
	key := countKey{tok.ID, kind}
	t.mu.Lock()
	c := t.own[key]
	if c == nil {
		c = &count{}
		t.own[key] = c
	}
	if c.interval != interval || c.window != window {
		c.interval, c.window, c.n, c.reported = interval, window, 0, false
	}
	others := t.table.Usage(tok.ID, kind, interval, window, t.self)
	if c.n+others >= limit {
		t.mu.Unlock()
		t.refused.WithLabelValues(route).Inc()
		return nil, t.refusal(tok, kind, now, window)
	}
	c.n++
	c.reported = false
	t.mu.Unlock()
	t.wake()
	success := http.StatusCreated
	if kind == auth.UsageRead {
		success = http.StatusOK
	}
	return func(status int) {
		if status != success {
			t.giveBack(key, interval, window)
		}
	}, nil
}

// refusal is the 429 of a request of kind by tok at now, in window: with
// lmstfy's message as "msg", and onceq's, which lmstfy's client reads,
// as "error".
func (t *throttle) refusal(tok auth.Token, kind auth.UsageKind, now time.Time, window int64) error {
	action, what := "consume", "consumes"
	if kind == auth.UsageWrite {
		action, what = "produce", "publishes"
	}
	wait := time.Unix((window+1)*tok.Limit.Interval, 0).Sub(now)
	return &apiError{status: http.StatusTooManyRequests, retryAfter: wait,
		lmstfyMsg: fmt.Sprintf("token(%s) %s reach the limit rate, please retry later", tok.ID, action),
		msg: fmt.Sprintf("token %s reached its limit of %d %s every %d s, across the servers: retry after %v, when its window ends",
			tok.ID, tok.Limit.Of(kind), what, tok.Limit.Interval, wait.Round(time.Millisecond))}
}

// giveBack gives back a request's count, unless its window passed.
func (t *throttle) giveBack(key countKey, interval, window int64) {
	t.mu.Lock()
	c := t.own[key]
	if c != nil && c.interval == interval && c.window == window && c.n > 0 {
		c.n--
		c.reported = false
	}
	t.mu.Unlock()
	t.wake()
}

// used is tok's requests of kind in the current window of its limit,
// this server's and what the others reported.
func (t *throttle) used(tok auth.Token, kind auth.UsageKind) int64 {
	interval := tok.Limit.Interval
	window := t.now().Unix() / interval
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	if c := t.own[countKey{tok.ID, kind}]; c != nil && c.interval == interval && c.window == window {
		n = c.n
	}
	return n + t.table.Usage(tok.ID, kind, interval, window, t.self)
}

func (t *throttle) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// start runs the reports until close.
func (t *throttle) start() { go t.run() }

// run reports the counts that changed, every reportEvery while there are
// counts, and forgets the stale reports every sweepEvery.
func (t *throttle) run() {
	defer close(t.done)
	var swept, reported time.Time
	for busy := false; ; {
		wait, kick := sweepEvery, t.kick
		if busy {
			wait, kick = reportEvery, nil
		}
		select {
		case <-t.quit:
			t.finish()
			return
		case <-time.After(wait):
		case <-kick:
			// A first count: report it at once, unless the last
			// report was less than a report interval ago.
			select {
			case <-t.quit:
				t.finish()
				return
			case <-time.After(reportEvery - time.Since(reported)):
			}
		}
		reported = time.Now()
		now := t.now()
		busy = t.report(now)
		if now.Sub(swept) >= sweepEvery {
			t.table.SweepUsage(now.Add(-usageStale))
			swept = now
		}
	}
}

// finish writes the counts that changed and waits for the writes, for a
// few seconds at most: the reports are best effort.
func (t *throttle) finish() {
	t.report(t.now())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.table.FlushUsage(ctx)
}

// report writes the counts that changed since the last report and
// forgets the reports whose window passed, at now. It returns whether
// counts are left to watch.
func (t *throttle) report(now time.Time) (busy bool) {
	var reports []auth.Usage
	var forget []countKey
	t.mu.Lock()
	for key, c := range t.own {
		switch {
		case now.Unix()/c.interval != c.window:
			if c.written {
				forget = append(forget, key)
			}
			delete(t.own, key)
		case !c.reported:
			reports = append(reports, auth.Usage{Token: key.id, Kind: key.kind, Server: t.self, Interval: c.interval, Window: c.window, Count: c.n})
			c.reported, c.written = true, true
		}
	}
	busy = len(t.own) > 0
	t.mu.Unlock()
	for _, u := range reports {
		t.table.ReportUsage(u)
	}
	for _, key := range forget {
		t.table.ForgetUsage(key.id, key.kind, t.self)
	}
	return busy
}

// close writes the counts that changed and stops. The reports stay: a
// server started in the same window counts them, until they are stale.
func (t *throttle) close() {
	close(t.quit)
	<-t.done
}
