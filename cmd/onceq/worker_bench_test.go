package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// BenchmarkWorkerTail: the tail latency of `onceq worker` with an http
// handler that takes 5 ms, at --concurrency 64, under 2,000 tasks a second
// for 10 s (ONCEQ_BENCH_TAIL_HANDLER_MS, ONCEQ_BENCH_TAIL_RATE and
// ONCEQ_BENCH_TAIL_SECONDS set them), exactly once and at least once side
// by side: ONCEQ_BENCH_TAIL_PAIRS pairs (3), each running both in turns
// whose order alternates, and an in-process exactly-once worker with the
// same handler on the same load. The broker is a process of its own.
//
// A task's latency is its submission to its handler's start (the HTTP
// server's receipt of it). Reported: the medians over the pairs of each
// run's p50 and p99, of the per-pair ratio of exactly-once's p99 to
// at-least-once's (and its largest), and the CPU per task of the CLI
// worker against the library's: consumer.New with the same handler and
// concurrency, run by this test binary in a process of its own
// (TestTailLibraryWorker), so that both CPU figures come from /proc for
// the worker's process alone while the load runs. ONCEQ_BENCH_TAIL_PROFILE
// names a directory for a CPU profile of the first CLI run of each
// guarantee. Run:
//
//	go test ./cmd/onceq -run '^$' -bench BenchmarkWorkerTail -benchtime 1x -timeout 30m
func BenchmarkWorkerTail(b *testing.B) {
	handlerMS := envInt(b, "ONCEQ_BENCH_TAIL_HANDLER_MS", 5)
	rate := envInt(b, "ONCEQ_BENCH_TAIL_RATE", 2000)
	seconds := envInt(b, "ONCEQ_BENCH_TAIL_SECONDS", 10)
	pairs := envInt(b, "ONCEQ_BENCH_TAIL_PAIRS", 3)
	baseBin := os.Getenv("ONCEQ_BENCH_TAIL_BASE")
	_, addr := testutil.StartBrokerProcess(b, "", b.TempDir())
	conn := broker.Conn{Brokers: []string{addr}}
	srv := startTailServer(b, time.Duration(handlerMS)*time.Millisecond)
	p, err := producer.New(producer.Conn(conn))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	lb := &tailLoad{b: b, conn: conn, srv: srv, p: p, rate: rate, n: rate * seconds}
	for range b.N {
		var eos99, alo99, eos50, alo50, ratios, lib99, cliCPU, libCPU []float64
		var base99, baseRatios, baseCPU []float64
		for i := range pairs {
			runs := []consumer.Guarantee{consumer.ExactlyOnce, consumer.AtLeastOnce}
			if i%2 == 1 {
				slices.Reverse(runs)
			}
			if baseBin != "" {
				// The base binary's pair, before or after this one's, in turns.
				var bp [2]tailResult
				for _, g := range runs {
					r := lb.runCLI(baseBin, g)
					if g == consumer.ExactlyOnce {
						bp[0] = r
					} else {
						bp[1] = r
					}
				}
				b.Logf("pair %d, base: exactly-once p50/p99 %.1f/%.1f ms, at-least-once %.1f/%.1f ms (ratio %.2f); CPU/task %.0f us",
					i+1, bp[0].p50, bp[0].p99, bp[1].p50, bp[1].p99, bp[0].p99/bp[1].p99, bp[0].workerCPU)
				base99, baseRatios, baseCPU = append(base99, bp[0].p99), append(baseRatios, bp[0].p99/bp[1].p99), append(baseCPU, bp[0].workerCPU)
			}
			var pair [2]tailResult
			for _, g := range runs {
				r := lb.runCLI(testutil.Binary(b), g)
				if g == consumer.ExactlyOnce {
					pair[0] = r
					cliCPU = append(cliCPU, r.workerCPU)
				} else {
					pair[1] = r
				}
			}
			lib := lb.runLibrary()
			b.Logf("pair %d: exactly-once p50/p99 %.1f/%.1f ms, at-least-once %.1f/%.1f ms (ratio %.2f); library exactly-once %.1f/%.1f ms; CPU/task: CLI %.0f us, library %.0f us",
				i+1, pair[0].p50, pair[0].p99, pair[1].p50, pair[1].p99, pair[0].p99/pair[1].p99, lib.p50, lib.p99, pair[0].workerCPU, lib.workerCPU)
			eos50, eos99 = append(eos50, pair[0].p50), append(eos99, pair[0].p99)
			alo50, alo99 = append(alo50, pair[1].p50), append(alo99, pair[1].p99)
			ratios = append(ratios, pair[0].p99/pair[1].p99)
			lib99 = append(lib99, lib.p99)
			libCPU = append(libCPU, lib.workerCPU)
		}
		b.ReportMetric(median(eos50), "eos-p50-ms")
		b.ReportMetric(median(eos99), "eos-p99-ms")
		b.ReportMetric(median(alo50), "alo-p50-ms")
		b.ReportMetric(median(alo99), "alo-p99-ms")
		b.ReportMetric(median(ratios), "eos/alo-p99")
		b.ReportMetric(slices.Max(ratios), "eos/alo-p99-max")
		b.ReportMetric(median(lib99), "lib-eos-p99-ms")
		b.ReportMetric(median(cliCPU), "cli-cpu-us/task")
		b.ReportMetric(median(libCPU), "lib-cpu-us/task")
		b.ReportMetric(median(cliCPU)/median(libCPU), "cli/lib-cpu")
		if baseBin != "" {
			b.ReportMetric(median(base99), "base-eos-p99-ms")
			b.ReportMetric(median(baseRatios), "base-eos/alo-p99")
			b.ReportMetric(median(baseCPU), "base-cli-cpu-us/task")
		}
	}
}

// tailResult is one run's figures: latency percentiles in ms, and the
// worker process's CPU per task in us.
type tailResult struct {
	p50, p99  float64
	workerCPU float64
}

// tailLoad runs one worker at a time over a queue of its own and offers
// it the load.
type tailLoad struct {
	b       *testing.B
	conn    broker.Conn
	srv     *tailServer
	p       *producer.Producer
	rate, n int
	runs    int
}

// next makes the next run's queue and group.
func (l *tailLoad) next() (queue, group string) {
	l.runs++
	queue = fmt.Sprintf("tail-%d", l.runs)
	testutil.CreateTopic(l.b, l.conn, queue, 8)
	return queue, "g-" + queue
}

// runCLI runs `onceq worker` of guarantee g over a new queue while the
// load runs.
func (l *tailLoad) runCLI(bin string, g consumer.Guarantee) tailResult {
	b := l.b
	queue, group := l.next()
	metrics := testutil.FreeAddr(b)
	args := []string{"worker", "--brokers", l.conn.Brokers[0], "--queue", queue, "--group", group,
		"--checkpoint-dir", filepath.Join(b.TempDir(), "w"), "--handler", "http:" + l.srv.url, "--concurrency", "64",
		"--guarantee", string(g), "--metrics-addr", metrics, "--log-level", "warn",
		"--delay-service=false", "--workflow-service=false", "--scheduler=false"}
	profile := os.Getenv("ONCEQ_BENCH_TAIL_PROFILE") != "" && bin == testutil.Binary(b)
	if profile {
		args = append(args, "--pprof") // a base binary may not know it
	}
	w := testutil.StartBinary(b, bin, args...)
	waitReady(b, metrics, w)
	var profiled <-chan struct{}
	if profile {
		profiled = l.profile(metrics, g)
	} else {
		done := make(chan struct{})
		close(done)
		profiled = done
	}
	worker := testutil.ProcCPU(w.Cmd.Process.Pid)
	lat := l.offer(queue)
	<-profiled
	workerCPU := testutil.ProcCPU(w.Cmd.Process.Pid) - worker
	b.Logf("%s: commits %s", g, commitTimes(b, metrics))
	w.Signal(syscall.SIGTERM)
	if code, err := w.Wait(time.Minute); err != nil || code != 0 {
		b.Fatalf("worker exit %d (%v):\n%s", code, err, w.Output())
	}
	return tailResult{p50: pct(lat, 0.5), p99: pct(lat, 0.99), workerCPU: perTask(workerCPU, l.n)}
}

// profile writes a CPU profile of the first CLI run of guarantee g, 5 s
// of its load, to ONCEQ_BENCH_TAIL_PROFILE/<g>.pprof when that is set.
func (l *tailLoad) profile(addr string, g consumer.Guarantee) <-chan struct{} {
	done := make(chan struct{})
	dir := os.Getenv("ONCEQ_BENCH_TAIL_PROFILE")
	file := filepath.Join(dir, string(g)+".pprof")
	if _, err := os.Stat(file); dir == "" || err == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=5")
		if err != nil {
			l.b.Errorf("profile: %v", err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil {
			err = os.WriteFile(file, body, 0o644)
		}
		if err != nil {
			l.b.Errorf("profile: %v", err)
		}
	}()
	return done
}

// commitTimes says how many commits the worker whose metrics listen on
// addr made and their mean time, by stage.
func commitTimes(b *testing.B, addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	for _, m := range fams["onceq_commit_duration_seconds"].GetMetric() {
		h := m.GetHistogram()
		if n := h.GetSampleCount(); n > 0 {
			out = append(out, fmt.Sprintf("%s %d, mean %.1f ms", m.GetLabel()[0].GetValue(), n, h.GetSampleSum()/float64(n)*1000))
		}
	}
	return strings.Join(out, "; ")
}

// runLibrary runs an exactly-once worker of the library with the CLI's
// http handler (TestTailLibraryWorker, this test binary in a process of
// its own) while the load runs.
func (l *tailLoad) runLibrary() tailResult {
	b := l.b
	queue, group := l.next()
	bin, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	spec, err := json.Marshal(libraryWorker{Brokers: l.conn.Brokers, Queue: queue, Group: group, Handler: "http:" + l.srv.url, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Setenv(libraryWorkerEnv, string(spec))
	w := testutil.StartBinary(b, bin, "-test.run", "^TestTailLibraryWorker$")
	w.WaitOutput(b, "library worker ready", time.Minute)
	start := testutil.ProcCPU(w.Cmd.Process.Pid)
	lat := l.offer(queue)
	cpu := testutil.ProcCPU(w.Cmd.Process.Pid) - start
	w.Signal(syscall.SIGTERM)
	if code, err := w.Wait(time.Minute); err != nil || code != 0 {
		b.Fatalf("library worker exit %d (%v):\n%s", code, err, w.Output())
	}
	return tailResult{p50: pct(lat, 0.5), p99: pct(lat, 0.99), workerCPU: perTask(cpu, l.n)}
}

// libraryWorker is what TestTailLibraryWorker runs, from libraryWorkerEnv.
type libraryWorker struct {
	Brokers                    []string
	Queue, Group, Handler, Dir string
}

const libraryWorkerEnv = "ONCEQ_TAIL_LIBRARY_WORKER"

// TestTailLibraryWorker is BenchmarkWorkerTail's library worker, run in a
// process of its own; without libraryWorkerEnv there is nothing to run.
// It prints "library worker ready" once its partitions are assigned and
// stops at SIGTERM.
func TestTailLibraryWorker(t *testing.T) {
	v := os.Getenv(libraryWorkerEnv)
	if v == "" {
		t.Skip("BenchmarkWorkerTail's helper process")
	}
	var spec libraryWorker
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		t.Fatalf("%s: %v", libraryWorkerEnv, err)
	}
	h, _, err := handlers.Parse(spec.Handler)
	if err != nil {
		t.Fatal(err)
	}
	w, err := consumer.New(consumer.Conn(broker.Conn{Brokers: spec.Brokers}), consumer.Group(spec.Group), consumer.Queues(spec.Queue),
		consumer.Concurrency(64), consumer.CheckpointDir(spec.Dir), consumer.WithHandler(h))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for w.Ready() != nil {
		select {
		case err := <-done:
			t.Fatalf("the library worker stopped before it was ready: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Println("library worker ready")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// offer submits l.n tasks to queue at l.rate, each carrying its
// submission time, waits until the HTTP handler received them all, and
// returns their latencies, sorted.
func (l *tailLoad) offer(queue string) []time.Duration {
	b := l.b
	got := l.srv.expect(queue, l.n)
	ctx := context.Background()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	per := max(l.rate/100, 1)
	for sent := 0; sent < l.n; {
		<-tick.C
		for j := 0; j < per && sent < l.n; j++ {
			l.p.SubmitAsync(ctx, onceq.Task{Queue: queue, Payload: []byte(strconv.FormatInt(time.Now().UnixNano(), 10))}, nil)
			sent++
		}
	}
	if err := l.p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case lat := <-got:
		slices.Sort(lat)
		return lat
	case <-time.After(5 * time.Minute):
		b.Fatalf("the handler received %d of %d tasks of %s in 5 minutes", l.srv.count(), l.n, queue)
		return nil
	}
}

// tailServer is the http handler's server: it takes handlerTime for each
// task and records each task's latency, its receipt less the submission
// time its payload carries.
type tailServer struct {
	url         string
	handlerTime time.Duration

	mu    sync.Mutex
	queue string
	want  int
	lat   []time.Duration
	done  chan []time.Duration
}

func startTailServer(b *testing.B, handlerTime time.Duration) *tailServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &tailServer{url: "http://" + ln.Addr().String() + "/task", handlerTime: handlerTime}
	hs := &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	b.Cleanup(func() { _ = hs.Close() })
	return s
}

func (s *tailServer) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(r.Body)
	sent, perr := strconv.ParseInt(string(body), 10, 64)
	if err != nil || perr != nil {
		http.Error(w, "want a submission time", http.StatusBadRequest)
		return
	}
	time.Sleep(s.handlerTime)
	s.mu.Lock()
	if r.Header.Get("Onceq-Queue") == s.queue && s.done != nil {
		s.lat = append(s.lat, at.Sub(time.Unix(0, sent)))
		if len(s.lat) == s.want {
			s.done <- s.lat
			s.done = nil
		}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// expect starts counting the tasks of queue: the channel gets the
// latencies of the first n.
func (s *tailServer) expect(queue string, n int) <-chan []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue, s.want, s.lat = queue, n, make([]time.Duration, 0, n)
	s.done = make(chan []time.Duration, 1)
	return s.done
}

func (s *tailServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lat)
}

func perTask(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }

// pct is the q quantile of sorted latencies, in ms.
func pct(sorted []time.Duration, q float64) float64 {
	return float64(sorted[int(q*float64(len(sorted)-1))].Microseconds()) / 1000
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// envInt is a positive number from the environment, or def.
func envInt(b *testing.B, name string, def int) int {
	v := testutil.EnvCounts(b, name, []int{def}, 1, 1_000_000)
	return v[0]
}
