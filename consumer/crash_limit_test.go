package consumer_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/limit"
	"github.com/onceq/onceq/internal/testutil"
)

// limitedAPI is the API a limited queue calls: it keeps each call's
// start (the handler's, from its Onceq-Started header), arrival and end,
// and answers after 250-550 ms: at 10 calls a second, about 4 are in
// progress, and the limit of 5 running holds back the bursts.
type limitedAPI struct {
	mu    sync.Mutex
	calls []apiCall
	ids   map[string]int
}

type apiCall struct{ start, arrival, end time.Time }

func (a *limitedAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	ms, err := strconv.ParseInt(r.Header.Get(handlers.StartedHTTPHeader), 10, 64)
	if err != nil {
		http.Error(w, "no start", http.StatusBadRequest)
		return
	}
	id := r.Header.Get("Onceq-Id")
	h := fnv.New32a()
	h.Write([]byte(id))
	time.Sleep(time.Duration(250+h.Sum32()%300) * time.Millisecond)
	end := time.Now()
	a.mu.Lock()
	a.calls = append(a.calls, apiCall{time.UnixMilli(ms), arrival, end})
	a.ids[id]++
	a.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// The limit of TestCrashLimitedQueue and BenchmarkLimitedQueue: starts a
// second, and running at once.
const limitRate, limitRunning = 10, 5

// startLimited starts five "onceq worker" processes on a queue "in" of 10
// partitions limited to limitRate starts a second and limitRunning
// running, whose handler calls an API that keeps each call, and loads n
// tasks into it. It returns the API, the workers, and how to start a
// worker again on its checkpoint dir.
func startLimited(tb testing.TB, conn broker.Conn, n int) (*limitedAPI, []*workerProc, func(dir string) *testutil.Process) {
	tb.Helper()
	api := &limitedAPI{ids: map[string]int{}}
	srv := httptest.NewServer(api)
	tb.Cleanup(srv.Close)
	testutil.CreateTopic(tb, conn, "in", 10)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := limit.Set(ctx, conn, "in", limit.Limit{Count: limitRate, Per: time.Second, Running: limitRunning}); err != nil {
		tb.Fatal(err)
	}
	start := func(dir string) *testutil.Process {
		return testutil.Start(tb, "worker", "--brokers", strings.Join(conn.Brokers, ","), "--group", "limited", "--queue", "in", "--handler", "http:"+srv.URL,
			"--checkpoint-dir", dir, "--metrics-addr", "", "--session-timeout", "6s",
			"--transaction-timeout", "5s", "--commit-interval", "50ms", "--log-level", "warn", "--delay-service=false",
			"--concurrency", "4", "--timeout", "2s", "--abandon-grace", "500ms")
	}
	slots := make([]*workerProc, 5)
	for i := range slots {
		dir := filepath.Join(tb.TempDir(), fmt.Sprintf("w%d", i))
		slots[i] = &workerProc{dir: dir, proc: start(dir)}
	}
	tasks := make([]onceq.Task, n)
	for i, id := range ids(n) {
		tasks[i] = onceq.Task{ID: id, Payload: []byte(id)}
	}
	produceQuiet(conn, "in", tasks)
	return api, slots, start
}

// BenchmarkLimitedQueue: how close a limited queue with a backlog comes to
// its limit. startLimited's five workers run 300 tasks (30 s at the
// limit); reported: starts a second from the first start to the last, and
// that over the limit's 10. Run:
//
//	go test ./consumer -run '^$' -bench BenchmarkLimitedQueue -benchtime 1x
func BenchmarkLimitedQueue(b *testing.B) {
	for range b.N {
		_, conn := testutil.StartBroker(b, "")
		const n = 30 * limitRate
		api, slots, _ := startLimited(b, conn, n)
		for deadline := time.Now().Add(5 * time.Minute); api.count() < n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("%d calls of %d after 5 minutes", api.count(), n)
			}
		}
		for _, s := range slots {
			s.proc.Kill()
		}
		api.mu.Lock()
		starts := make([]time.Time, len(api.calls))
		for i, c := range api.calls {
			starts[i] = c.start
		}
		api.mu.Unlock()
		slices.SortFunc(starts, time.Time.Compare)
		rate := float64(len(starts)-1) / starts[len(starts)-1].Sub(starts[0]).Seconds()
		b.ReportMetric(rate, "starts/s")
		b.ReportMetric(rate/limitRate, "of-limit")
	}
}

// limitDuration is how long TestCrashLimitedQueue's limit is busy: 60 s,
// or 20 s with -short.
func limitDuration() time.Duration {
	if testing.Short() {
		return 20 * time.Second
	}
	return 60 * time.Second
}

// maxStartGap is the longest TestCrashLimitedQueue lets its limited
// queue go without a start while its backlog waits.
const maxStartGap = 5 * time.Second

// TestCrashLimitedQueue: five "onceq worker" processes run a queue
// limited to 10 starts a second and 5 running at once, whose handler
// calls an HTTP API, for 60 s with a backlog throughout; one worker is
// SIGKILLed a third of the way and started again. From the handlers'
// starts (their Onceq-Started header) and the API's ends: no second (any
// window of one) holds more than 10 starts, at most 5 calls are in
// progress at any instant, and no start waits more than maxStartGap
// after the one before; and every task succeeds once.
func TestCrashLimitedQueue(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	n := int(limitDuration().Seconds() * limitRate)
	api, slots, start := startLimited(t, conn, n)
	const rate, running = limitRate, limitRunning

	// SIGKILL one worker a third of the way, and start it again.
	deadline := time.Now().Add(4 * time.Minute)
	for api.count() < n/3 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls of %d", api.count(), n)
		}
		checkRunning(t, slots)
		time.Sleep(50 * time.Millisecond)
	}
	victim := slots[2]
	victim.proc.Signal(syscall.SIGKILL)
	if _, err := victim.proc.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	victim.proc = start(victim.dir)
	final := waitFinal(t, conn, n, deadline, func() {
		for _, s := range slots {
			t.Logf("worker %s:\n%s", s.dir, tail(s.proc.Output(), 3000))
		}
		t.Logf("broker:\n%s", testutil.BrokerState(conn))
	})
	for _, s := range slots {
		s.proc.Signal(syscall.SIGTERM)
	}
	for _, s := range slots {
		if code, err := s.proc.Wait(time.Minute); err != nil || code != 0 {
			t.Errorf("worker exit %d (%v):\n%s", code, err, tail(s.proc.Output(), 2000))
		}
	}
	for _, id := range ids(n) {
		if final[id] != 1 {
			t.Errorf("task %s: %d final records; want 1, succeeded", id, final[id])
		}
	}

	api.mu.Lock()
	defer api.mu.Unlock()
	calls := slices.Clone(api.calls)
	slices.SortFunc(calls, func(a, b apiCall) int { return a.start.Compare(b.start) })
	for i := 0; i+rate < len(calls); i++ {
		if d := calls[i+rate].start.Sub(calls[i].start); d < time.Second {
			t.Errorf("%d starts within %v, from call %d at %v", rate+1, d, i, calls[i].start.Sub(calls[0].start))
		}
	}
	// What the API saw: the starts, each some network time later. The
	// limit bounds the starts; this only reports the closest 11 arrivals.
	arrivals := make([]time.Time, len(calls))
	for i, c := range calls {
		arrivals[i] = c.arrival
	}
	slices.SortFunc(arrivals, time.Time.Compare)
	closest := time.Hour
	for i := 0; i+rate < len(arrivals); i++ {
		closest = min(closest, arrivals[i+rate].Sub(arrivals[i]))
	}
	most := 0
	for _, c := range calls {
		at := 0
		for _, o := range calls {
			if !o.start.After(c.start) && o.end.After(c.start) {
				at++
			}
		}
		if at > running {
			t.Errorf("%d calls in progress at %v", at, c.start.Sub(calls[0].start))
		}
		most = max(most, at)
	}
	span := calls[len(calls)-1].start.Sub(calls[0].start)
	avg := float64(len(calls)-1) / span.Seconds()
	gap, gapAt := time.Duration(0), time.Duration(0)
	for i := 1; i < len(calls); i++ {
		if d := calls[i].start.Sub(calls[i-1].start); d > gap {
			gap, gapAt = d, calls[i-1].start.Sub(calls[0].start)
		}
	}
	t.Logf("%d tasks, %d calls (%d again after the kill) in %v: %.2f starts/s, at most %d in progress, longest wait for a start %v; the closest %d arrivals at the API span %v",
		n, len(calls), len(calls)-n, span.Round(time.Millisecond), avg, most, gap.Round(time.Millisecond), rate+1, closest.Round(time.Millisecond))
	// The backlog lasts the whole run: a limit that stops letting tasks
	// start (a place or a token the killed worker held and nobody gets
	// back) leaves a gap. How close the starts come to 10 a second is
	// the machine's: BenchmarkLimitedQueue measures it.
	if gap > maxStartGap {
		t.Errorf("no task started for %v, from %v into the run, with a backlog waiting; want a start at least every %v", gap.Round(time.Millisecond), gapAt.Round(time.Millisecond), maxStartGap)
	}
	if os.Getenv("ONCEQ_LIMIT_STAMPS") != "" {
		for _, c := range calls {
			t.Log(c.start.Sub(calls[0].start).Milliseconds(), c.end.Sub(c.start).Milliseconds())
		}
	}
}

func (a *limitedAPI) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// waitFinal waits until the records topic of "in" holds n final records,
// and returns them by ID, succeeded ones counted and any other failing the
// test. Past deadline it calls stalled, to log what the workers and the
// broker were doing, and fails naming tasks that are not final.
func waitFinal(t *testing.T, conn broker.Conn, n int, deadline time.Time, stalled func()) map[string]int {
	t.Helper()
	for {
		final := map[string]int{}
		for _, r := range testutil.ReadCommitted(t, conn, time.Minute, broker.RecordsTopic("in")) {
			recs, err := onceq.DecodeTaskRecords(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range recs {
				switch {
				case tr.State == onceq.StateSucceeded:
					final[tr.ID]++
					if os.Getenv("ONCEQ_LIMIT_STAMPS") != "" {
						t.Logf("%s p%d@%d attempt %d worker %s started %d finished %d (record p%d@%d)", tr.ID, tr.Partition, tr.Offset, tr.Attempt, tr.Worker, tr.Started.UnixMilli(), tr.Finished.UnixMilli(), r.Partition, r.Offset)
					}
				case tr.State.Final():
					t.Fatalf("task %s ended %s: %s", tr.ID, tr.State, tr.Error)
				}
			}
		}
		total := 0
		for _, c := range final {
			total += c
		}
		if total >= n {
			return final
		}
		if time.Now().After(deadline) {
			var missing []string
			for _, id := range ids(n) {
				if final[id] == 0 && len(missing) < 20 {
					missing = append(missing, id)
				}
			}
			stalled()
			t.Fatalf("%d of %d tasks final; not final: %v", total, n, missing)
		}
		time.Sleep(time.Second)
	}
}
