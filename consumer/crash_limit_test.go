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

// limitDuration is how long TestCrashLimitedQueue's limit is busy: 60 s,
// or 20 s with -short.
func limitDuration() time.Duration {
	if testing.Short() {
		return 20 * time.Second
	}
	return 60 * time.Second
}

// TestCrashLimitedQueue: five "onceq worker" processes run a queue
// limited to 10 starts a second and 5 running at once, whose handler
// calls an HTTP API, for 60 s with a backlog throughout; one worker is
// SIGKILLed a third of the way and started again. From the handlers'
// starts (their Onceq-Started header) and the API's ends: no second (any
// window of one) holds more than 10 starts, starts average at least 9.5
// a second, and at most 5 calls are in progress at any instant; and every
// task succeeds once.
func TestCrashLimitedQueue(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	addr := conn.Brokers[0]
	api := &limitedAPI{ids: map[string]int{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	const rate, running = 10, 5
	n := int(limitDuration().Seconds() * rate)
	testutil.CreateTopic(t, conn, "in", 10)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := limit.Set(ctx, conn, "in", limit.Limit{Count: rate, Per: time.Second, Running: running}); err != nil {
		t.Fatal(err)
	}
	start := func(dir string) *testutil.Process {
		return testutil.Start(t, "worker", "--brokers", addr, "--group", "limited", "--queue", "in", "--handler", "http:"+srv.URL,
			"--checkpoint-dir", dir, "--metrics-addr", "", "--session-timeout", "6s",
			"--transaction-timeout", "5s", "--commit-interval", "50ms", "--log-level", "warn", "--delay-service=false",
			"--concurrency", "4", "--timeout", "2s", "--abandon-grace", "500ms")
	}
	slots := make([]*workerProc, 5)
	for i := range slots {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", i))
		slots[i] = &workerProc{dir: dir, proc: start(dir)}
	}
	tasks := make([]onceq.Task, n)
	for i, id := range ids(n) {
		tasks[i] = onceq.Task{ID: id, Payload: []byte(id)}
	}
	produceQuiet(conn, "in", tasks)

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
	t.Logf("%d tasks, %d calls (%d again after the kill) in %v: %.2f starts/s, at most %d in progress; the closest %d arrivals at the API span %v",
		n, len(calls), len(calls)-n, span.Round(time.Millisecond), avg, most, rate+1, closest.Round(time.Millisecond))
	if avg < 9.5 {
		t.Errorf("%.2f starts a second on average; want at least 9.5", avg)
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
