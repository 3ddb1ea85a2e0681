package watermill_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/onceq/onceq/bench"
)

// BenchmarkWorkerVsAsynq drains pre-loaded 100-byte tasks with IDs a
// client chose with onceq's exactly-once worker (noop handler, 8
// partitions; ONCEQ_BENCH_TASKS of them, 1,000,000 by default), and tasks
// enqueued with such IDs (asynq.TaskID) in asynq,
// on a Redis server of its own that keeps an append-only file fsynced
// every second (its durable setting), drained by an asynq server of
// concurrency 32 (the worker's default) with a noop handler, until its
// queue holds none pending or active. The two take
// turns at going first. asynq's count is ONCEQ_BENCH_ASYNQ_TASKS, default
// 50,000: it runs thousands of tasks a second. It needs redis-server on the
// PATH (Debian's redis-server package) and skips without it.
func BenchmarkWorkerVsAsynq(b *testing.B) {
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		b.Skip("redis-server is not on the PATH: apt-get install redis-server")
	}
	n, na := bench.EnvTasks(), 50_000
	if v := os.Getenv("ONCEQ_BENCH_ASYNQ_TASKS"); v != "" {
		if na, err = strconv.Atoi(v); err != nil || na < 1000 {
			b.Fatalf("ONCEQ_BENCH_ASYNQ_TASKS=%q: want a number of tasks, 1000 or more", v)
		}
	}
	conn, pre := cluster(b)
	keys := pre + "bench-keys"
	preload(b, conn, keys, n, false)
	addr := startRedis(b, redis)
	var onceqTook, asynqTook time.Duration
	runs := 0
	for i := 0; b.Loop(); i++ {
		drains := []func(){
			func() {
				took, err := bench.Drain(context.Background(), conn, keys, fmt.Sprintf("%sonceq-%d", pre, i), b.TempDir(), n)
				if err != nil {
					b.Fatal(err)
				}
				onceqTook += took
			},
			func() { asynqTook += drainAsynq(b, addr, fmt.Sprintf("q%d", i), na) },
		}
		for j := range drains {
			drains[(i+j)%len(drains)]()
		}
		runs++
	}
	rate := func(n int, d time.Duration) float64 { return float64(n*runs) / d.Seconds() }
	b.ReportMetric(rate(n, onceqTook), "eos-keys-tasks/s")
	b.ReportMetric(rate(na, asynqTook), "asynq-tasks/s")
	b.ReportMetric(rate(n, onceqTook)/rate(na, asynqTook), "eos-keys/asynq")
}

// startRedis runs redis-server on a free loopback port, with an
// append-only file fsynced every second in a temporary directory, until
// the benchmark ends, and returns its address.
func startRedis(b *testing.B, bin string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--dir", b.TempDir(), "--save", "",
		"--appendonly", "yes", "--appendfsync", "everysec")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return addr
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("redis-server did not answer on %s within 30 s", addr)
		}
	}
}

// drainAsynq enqueues n tasks with IDs of their own in asynq queue queue,
// then runs an asynq server of concurrency 32 over it until it ran them
// all, and returns the time from the server's start.
func drainAsynq(b *testing.B, addr, queue string, n int) time.Duration {
	opt := asynq.RedisClientOpt{Addr: addr}
	cl := asynq.NewClient(opt)
	defer cl.Close()
	payload := []byte(strings.Repeat("x", 100))
	for i := range n {
		if _, err := cl.Enqueue(asynq.NewTask("noop", payload), asynq.Queue(queue), asynq.TaskID("t-"+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
	}
	var ran atomic.Int64
	done := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 32, Queues: map[string]int{queue: 1}, LogLevel: asynq.FatalLevel})
	start := time.Now()
	err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if ran.Add(1) == int64(n) {
			close(done)
		}
		return nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Minute):
		b.Fatalf("asynq ran %d of %d tasks in 30 minutes", ran.Load(), n)
	}
	// Done once asynq settled the last ones too, as the worker's drain is
	// done once it committed them.
	in := asynq.NewInspector(opt)
	defer in.Close()
	for {
		info, err := in.GetQueueInfo(queue)
		if err != nil {
			b.Fatal(err)
		}
		if info.Active == 0 && info.Pending == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	srv.Shutdown()
	return took
}
