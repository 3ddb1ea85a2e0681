package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// BenchmarkServeQueues: `onceq serve` and the embedded broker as processes
// of their own (or, under ONCEQ_TEST_KAFKA, the test binary's Apache Kafka
// cluster), driven by lmstfy's API over HTTP, over 1 and 500 queues
// (ONCEQ_BENCH_SERVE_QUEUES picks others, e.g. "1,500"), on the default
// lane (ONCEQ_BENCH_SERVE_LANE names another, or "topics" for a topic of
// one partition per queue):
//
//   - publish: 2,000 jobs at 200 jobs/s, spread over the queues, no
//     consumer: the server's and the broker's CPU per publish;
//   - consume+ack: consumers (one per 16 queues, at least 4, each
//     consuming its queues in one request, the queues dealt to them in
//     turn) take and acknowledge them: CPU per consume and ACK;
//   - latency: 200 jobs/s published for 10 s while the consumers run: each
//     job's publish to consume time, p50 and p99;
//   - idle: 10 s with every queue idle and no consumer: CPU in % of a core.
//
// The same workload runs against another lmstfy-compatible server given
// by ONCEQ_BENCH_SERVE_URL (its /api/{namespace}), ONCEQ_BENCH_SERVE_TOKEN
// and ONCEQ_BENCH_SERVE_PIDS (the processes to measure, comma-separated:
// the server, its store): lmstfy's own, side by side. Run:
//
//	go test ./cmd/onceq -run '^$' -bench BenchmarkServeQueues -benchtime 1x -timeout 30m
func BenchmarkServeQueues(b *testing.B) {
	counts := testutil.EnvCounts(b, "ONCEQ_BENCH_SERVE_QUEUES", []int{1, 500}, 1, 10_000)
	for _, n := range counts {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			for range b.N {
				target := serveTarget(b)
				runServeBench(b, target, n)
			}
		})
	}
}

// benchTarget is the server under measure: its namespace's base URL, a
// token, and the processes whose CPU counts, by name.
type benchTarget struct {
	base, token string
	pids        map[string]int
}

// serveTarget starts a broker and `onceq serve` as processes, or takes the
// server ONCEQ_BENCH_SERVE_URL names.
func serveTarget(b *testing.B) benchTarget {
	if u := os.Getenv("ONCEQ_BENCH_SERVE_URL"); u != "" {
		tg := benchTarget{base: strings.TrimRight(u, "/"), token: os.Getenv("ONCEQ_BENCH_SERVE_TOKEN"), pids: map[string]int{}}
		for i, f := range strings.Split(os.Getenv("ONCEQ_BENCH_SERVE_PIDS"), ",") {
			pid, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				b.Fatalf("ONCEQ_BENCH_SERVE_PIDS=%q: want process IDs, comma-separated", os.Getenv("ONCEQ_BENCH_SERVE_PIDS"))
			}
			tg.pids[[]string{"server", "store"}[min(i, 1)]+strconv.Itoa(i)] = pid
		}
		return tg
	}
	brokerAddr, brokerPIDs := benchBroker(b)
	code, out, stderr := runCLI(b, "", "--brokers", brokerAddr, "token", "create", "bench")
	if code != 0 {
		b.Fatalf("token create: %s", stderr)
	}
	listen := testutil.FreeAddr(b)
	args := []string{"serve", "--brokers", brokerAddr, "--listen", listen, "--data-dir", b.TempDir()}
	switch lane := os.Getenv("ONCEQ_BENCH_SERVE_LANE"); lane {
	case "": // the default lane, of --create-queues partitions
	case "topics":
		args = append(args, "--topic-per-queue", "--create-queues", "1")
	default:
		args = append(args, "--lane", lane)
	}
	srv := testutil.Start(b, args...)
	b.Cleanup(srv.Kill)
	srv.WaitOutput(b, "serving", 30*time.Second)
	tg := benchTarget{base: "http://" + listen + "/api/bench", token: strings.TrimSpace(out),
		pids: brokerPIDs}
	tg.pids["server"] = srv.Cmd.Process.Pid
	return tg
}

// benchBroker starts the broker the server under measure uses: the
// embedded broker as a process of its own, or under ONCEQ_TEST_KAFKA the
// test binary's Apache Kafka cluster (make kafka's, in effect), whose
// nodes' CPU counts as the broker's. It returns the seeds and the
// processes by name.
func benchBroker(b *testing.B) (string, map[string]int) {
	if testutil.OnKafka() {
		_, conn := testutil.StartBroker(b, "")
		c := testutil.KafkaCluster()
		pids := map[string]int{}
		for id := 1; id <= c.Nodes(); id++ {
			name := "broker"
			if c.Nodes() > 1 {
				name += strconv.Itoa(id)
			}
			pids[name] = c.PID(id)
		}
		return strings.Join(conn.Brokers, ","), pids
	}
	brokerAddr := testutil.FreeAddr(b)
	brk, _ := testutil.StartBrokerProcess(b, brokerAddr, b.TempDir())
	return brokerAddr, map[string]int{"broker": brk.Cmd.Process.Pid}
}

// cpuMeter measures the target's processes' CPU over a phase.
type cpuMeter struct {
	pids  map[string]int
	start map[string]time.Duration
	at    time.Time
}

func meter(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: map[string]time.Duration{}, at: time.Now()}
	for name, pid := range pids {
		m.start[name] = testutil.ProcCPU(pid)
	}
	return m
}

// perOp reports each process's CPU per op of n, in ms; and, with n 0,
// its CPU in % of a core.
func (m *cpuMeter) report(b *testing.B, phase string, n int) {
	wall := time.Since(m.at)
	for name, pid := range m.pids {
		used := testutil.ProcCPU(pid) - m.start[name]
		if n > 0 {
			b.ReportMetric(float64(used.Microseconds())/1000/float64(n), name+"-cpu-ms/"+phase)
		} else {
			b.ReportMetric(100*used.Seconds()/wall.Seconds(), name+"-cpu-%/"+phase)
		}
	}
}

// The benchmarks' publish pace: jobs published at rate a second.
const jobs, rate = 2000, 200

// publishPaced publishes count jobs at rate a second, to the queues in
// turn.
func publishPaced(b *testing.B, publish func(q string) error, queues []string, count int) {
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := range count {
		<-tick.C
		if err := publish(queues[i%len(queues)]); err != nil {
			b.Fatal(err)
		}
	}
}

// runServeBench runs the four phases over n queues.
func runServeBench(b *testing.B, tg benchTarget, n int) {
	queues := make([]string, n)
	for i := range queues {
		queues[i] = fmt.Sprintf("q%d", i)
	}
	cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	do := tokenRequests(cl, tg.token, tg.base)
	publish := func(q string) error {
		code, body, err := do("PUT", "/"+q+"?tries=3&ttl=3600&delay=0", strconv.FormatInt(time.Now().UnixNano(), 10))
		if err == nil && code != 201 {
			err = fmt.Errorf("publish to %s: %d %s", q, code, body)
		}
		return err
	}
	// Each queue exists and was consumed once before anything is measured.
	for _, q := range queues {
		if err := publish(q); err != nil {
			b.Fatal(err)
		}
	}
	var consumed atomic.Int64
	var lat testutil.Latencies
	stop := make(chan struct{})
	var wg sync.WaitGroup
	startConsumers := func() {
		stop = make(chan struct{})
		groups := max(4, (n+15)/16)
		for c := range groups {
			// Queue i is consumer i%groups's: the jobs, published to the
			// queues in turn, go to the consumers in turn.
			mine := []string{queues[c%n]}
			for i := c + groups; i < n; i += groups {
				mine = append(mine, queues[i])
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := "/" + strings.Join(mine, ",") + "?ttr=30&timeout=1"
				for {
					select {
					case <-stop:
						return
					default:
					}
					code, body, err := do("GET", path, "")
					if err != nil || code == 404 {
						continue
					}
					got := time.Now()
					var j struct {
						Queue string `json:"queue"`
						ID    string `json:"job_id"`
						Data  []byte `json:"data"`
					}
					if code != 200 || json.Unmarshal(body, &j) != nil {
						b.Errorf("consume: %d %s", code, body)
						return
					}
					if sent, err := strconv.ParseInt(string(j.Data), 10, 64); err == nil {
						lat.Add(got.Sub(time.Unix(0, sent)))
					}
					if code, body, err := do("DELETE", "/"+j.Queue+"/job/"+j.ID, ""); err != nil || code != 204 {
						b.Errorf("ack of %s: %d %s %v", j.ID, code, body, err)
						return
					}
					consumed.Add(1)
				}
			}()
		}
	}
	stopConsumers := func() {
		close(stop)
		wg.Wait()
	}
	waitConsumed := func(want int64) {
		deadline := time.Now().Add(5 * time.Minute)
		for consumed.Load() < want && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if consumed.Load() < want {
			b.Fatalf("%d of %d jobs consumed after 5 minutes", consumed.Load(), want)
		}
	}
	startConsumers()
	waitConsumed(int64(n))
	stopConsumers()
	lat.Reset()
	b.ResetTimer()

	paced := func(count int) { publishPaced(b, publish, queues, count) }
	m := meter(tg.pids)
	paced(jobs)
	m.report(b, "publish", jobs)

	m = meter(tg.pids)
	base := consumed.Load()
	startConsumers()
	waitConsumed(base + jobs)
	m.report(b, "consume-ack", jobs)
	lat.Reset()

	base = consumed.Load()
	paced(10 * rate)
	waitConsumed(base + 10*rate)
	stopConsumers()
	lat.Report(b, "publish-to-consume")

	time.Sleep(12 * time.Second) // the consumers' wants lapse
	m = meter(tg.pids)
	time.Sleep(10 * time.Second)
	m.report(b, "idle", 0)
}

// BenchmarkServeFloor: what a publish costs a Go HTTP server that does
// nothing with it. The same client and pace as BenchmarkServeQueues's
// publish phase, against a process whose handler reads the body and
// answers 201 with a job ID in lmstfy's shape: the CPU per publish no
// server written with net/http goes below on this machine, to read
// BenchmarkServeQueues's figures against. Run:
//
//	go test ./cmd/onceq -run '^$' -bench 'BenchmarkServe(Floor|Queues)$' -benchtime 1x
func BenchmarkServeFloor(b *testing.B) {
	for range b.N {
		listen := testutil.FreeAddr(b)
		cmd := exec.Command(os.Args[0], "-test.run=^TestBareHTTPServer$")
		cmd.Env = append(os.Environ(), "ONCEQ_BARE_HTTP_LISTEN="+listen)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
		do := tokenRequests(cl, "", "http://"+listen+"/api/bench")
		publish := func(q string) error {
			code, body, err := do("PUT", "/"+q+"?tries=3&ttl=3600&delay=0", strconv.FormatInt(time.Now().UnixNano(), 10))
			if err == nil && code != 201 {
				err = fmt.Errorf("publish to %s: %d %s", q, code, body)
			}
			return err
		}
		for deadline := time.Now().Add(10 * time.Second); publish("q") != nil; {
			if time.Now().After(deadline) {
				b.Fatal("the bare server does not answer after 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.ResetTimer()
		m := meter(map[string]int{"server": cmd.Process.Pid})
		publishPaced(b, publish, []string{"q"}, jobs)
		m.report(b, "publish", jobs)
	}
}

// TestBareHTTPServer is BenchmarkServeFloor's server, run in a process
// of its own when ONCEQ_BARE_HTTP_LISTEN names its address; skipped
// otherwise.
func TestBareHTTPServer(t *testing.T) {
	listen := os.Getenv("ONCEQ_BARE_HTTP_LISTEN")
	if listen == "" {
		t.Skip("BenchmarkServeFloor's server process: runs when ONCEQ_BARE_HTTP_LISTEN is set")
	}
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"msg":"published","job_id":"%d"}`, n.Add(1))
	})
	t.Fatal(http.ListenAndServe(listen, h))
}

// BenchmarkServeNewQueue: a queue's first consume. Each round publishes a
// job to a queue that did not exist (the publish creates it) and at once
// consumes it from a fresh queue name's point of view: the time from the
// consume's request to its answer, p50 and p99 over 20 queues, on
// `onceq serve` and the broker as processes. Run:
//
//	go test ./cmd/onceq -run '^$' -bench BenchmarkServeNewQueue -benchtime 1x
func BenchmarkServeNewQueue(b *testing.B) {
	for range b.N {
		tg := serveTarget(b)
		cl := &http.Client{Timeout: 30 * time.Second}
		do := tokenRequests(cl, tg.token, tg.base)
		var lat testutil.Latencies
		for i := range 20 {
			q := fmt.Sprintf("new%d-%d", i, time.Now().UnixNano())
			if code, body, err := do("PUT", "/"+q+"?tries=1", "x"); err != nil || code != 201 {
				b.Fatalf("publish to %s: %d %s %v", q, code, body, err)
			}
			t0 := time.Now()
			code, body, err := do("GET", "/"+q+"?ttr=30&timeout=10", "")
			if err != nil || code != 200 {
				b.Fatalf("first consume of %s: %d %s %v", q, code, body, err)
			}
			lat.Add(time.Since(t0))
			var j struct {
				ID string `json:"job_id"`
			}
			if err := json.Unmarshal(body, &j); err != nil {
				b.Fatal(err)
			}
			if code, body, err := do("DELETE", "/"+q+"/job/"+j.ID, ""); err != nil || code != 204 {
				b.Fatalf("ack: %d %s %v", code, body, err)
			}
		}
		lat.Report(b, "first-consume")
	}
}
