package consumer_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// BenchmarkQueues measures what a queue costs a worker: one exactly-once
// worker over N queues of one partition each (N from ONCEQ_BENCH_QUEUES,
// default 1,1000,10000), in the benchmark's process, the embedded broker
// in a process of its own ("onceq broker", memory only). It reports the
// time from Run to Ready, submit->start latency of tasks spread evenly
// over the queues at 200 tasks/s (every queue's first task included,
// which restores its partition), the CPU that the worker's process and the
// broker use once every queue is idle and quiet, and the peak RSS of each.
// The worker's process also holds the producer that submits the tasks.
// The worker and the producer keep their metrics summed over the queues,
// as the README advises for many queues (MetricsPerQueue).
// ONCEQ_BENCH_TASKS sets the number of tasks (default the larger of 2,000
// and N); ONCEQ_BENCH_HEAP_PROFILE and ONCEQ_BENCH_IDLE_PROFILE name files
// for the live heap after the tasks ran and a CPU profile of the idle.
// ONCEQ_BENCH_GUARANTEE=at-least-once and ONCEQ_BENCH_TASK_RECORDS=off
// measure the floor of a topic per queue: a worker that writes nothing
// per queue (no changelog, no records), so that no queue's first task
// meets a topic new to its client.
//
// ONCEQ_BENCH_LAYOUT=lanes makes the N queues lane queues of one lane
// ("bench/q-00000" and on), a topic of ONCEQ_BENCH_LANE_PARTITIONS
// partitions (default 4), instead of N topics.
func BenchmarkQueues(b *testing.B) {
	counts := testutil.EnvCounts(b, "ONCEQ_BENCH_QUEUES", []int{1, 1000, 10000}, 1, 100_000)
	for _, n := range counts {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			for b.Loop() {
				benchQueues(b, n)
			}
		})
	}
}

func benchQueues(b *testing.B, n int) {
	brk, addr := testutil.StartBrokerProcess(b, "", "")
	conn := broker.Conn{Brokers: []string{addr}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	queues := make([]string, n)
	lanes := false
	switch v := os.Getenv("ONCEQ_BENCH_LAYOUT"); v {
	case "", "topics":
	case "lanes":
		lanes = true
	default:
		b.Fatalf("ONCEQ_BENCH_LAYOUT=%q: want topics or lanes", v)
	}
	for i := range queues {
		queues[i] = fmt.Sprintf("q-%05d", i)
		if lanes {
			queues[i] = "bench/" + queues[i]
		}
	}
	cl, err := conn.NewClient()
	if err != nil {
		b.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	partitions := n // of every queue topic, or of the lane
	if lanes {
		partitions = 4
		if v := os.Getenv("ONCEQ_BENCH_LANE_PARTITIONS"); v != "" {
			if partitions, err = strconv.Atoi(v); err != nil || partitions < 1 {
				b.Fatalf("ONCEQ_BENCH_LANE_PARTITIONS=%q: want a partition count", v)
			}
		}
		if _, err := adm.CreateTopics(ctx, int32(partitions), -1, nil, "bench"); err != nil {
			b.Fatal(err)
		}
	} else {
		for i := 0; i < n; i += 1000 {
			if _, err := adm.CreateTopics(ctx, 1, -1, nil, queues[i:min(i+1000, n)]...); err != nil {
				b.Fatal(err)
			}
		}
	}
	cl.Close()

	var (
		mu    sync.Mutex
		acks  []time.Duration
		lat   []time.Duration
		first []time.Duration
		later []time.Duration // every task but each queue's first
		seen  = map[string]bool{}
	)
	done := make(chan struct{}, 1)
	// ONCEQ_BENCH_HANDLER=tail: each run takes 1-10 ms, and one in a
	// hundred 500 ms (the latency is measured at its start).
	tail := os.Getenv("ONCEQ_BENCH_HANDLER") == "tail"
	tasks := max(2000, n)
	if v := os.Getenv("ONCEQ_BENCH_TASKS"); v != "" {
		var err error
		if tasks, err = strconv.Atoi(v); err != nil || tasks < 1 {
			b.Fatalf("ONCEQ_BENCH_TASKS=%q: want a number of tasks", v)
		}
	}
	guarantee := consumer.ExactlyOnce
	if v := os.Getenv("ONCEQ_BENCH_GUARANTEE"); v != "" {
		var err error
		if guarantee, err = consumer.ParseGuarantee(v); err != nil {
			b.Fatalf("ONCEQ_BENCH_GUARANTEE=%q: %v", v, err)
		}
	}
	records := true
	switch v := os.Getenv("ONCEQ_BENCH_TASK_RECORDS"); v {
	case "", "on":
	case "off":
		records = false
	default:
		b.Fatalf("ONCEQ_BENCH_TASK_RECORDS=%q: want on or off", v)
	}
	reg := prometheus.NewRegistry()
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues(queues...), consumer.CheckpointDir(b.TempDir()), consumer.Registerer(reg),
		consumer.MetricsPerQueue(false), consumer.WithGuarantee(guarantee), consumer.TaskRecords(records),
		consumer.WithHandler(consumer.HandlerFunc(func(_ context.Context, t *consumer.Task) error {
			ns, _ := strconv.ParseInt(string(t.Payload), 10, 64)
			d := time.Since(time.Unix(0, ns))
			if tail {
				defer time.Sleep(tailSleep(t.ID))
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, d)
			if !seen[t.Queue] {
				seen[t.Queue] = true
				first = append(first, d)
			} else {
				later = append(later, d)
			}
			if len(lat) == tasks {
				done <- struct{}{}
			}
			return nil
		})))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	for w.Ready() != nil {
		select {
		case err := <-runErr:
			b.Fatalf("worker: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	ready := time.Since(start)

	p, err := producer.New(producer.Conn(conn), producer.MetricsPerQueue(false))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	tick := time.NewTicker(5 * time.Millisecond) // 200 tasks/s
	for i := range tasks {
		<-tick.C
		sent := time.Now()
		t := onceq.Task{Queue: queues[i%n], Payload: []byte(strconv.FormatInt(sent.UnixNano(), 10))}
		p.SubmitAsync(ctx, t, func(_ producer.Receipt, err error) {
			mu.Lock()
			acks = append(acks, time.Since(sent))
			mu.Unlock()
			if err != nil {
				b.Error(err)
			}
		})
	}
	tick.Stop()
	select {
	case <-done:
	case err := <-runErr:
		b.Fatalf("worker: %v", err)
	case <-time.After(5 * time.Minute):
		mu.Lock()
		b.Fatalf("%d of %d tasks ran in 5 minutes", len(lat), tasks)
	}

	if f := os.Getenv("ONCEQ_BENCH_HEAP_PROFILE"); f != "" {
		writeHeapProfile(b, f)
	}

	// Idle: every partition quiet (the worker fetches none), the last
	// commits behind.
	for deadline := time.Now().Add(time.Minute); metricValue(b, reg, "onceq_quiet_partitions") < float64(partitions); {
		if time.Now().After(deadline) {
			b.Fatalf("%v of %d partitions quiet a minute after the load", metricValue(b, reg, "onceq_quiet_partitions"), partitions)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if f := os.Getenv("ONCEQ_BENCH_IDLE_PROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
	}
	brokerPID := brk.Cmd.Process.Pid
	cpu0, brokerCPU0, wall0 := cpuTime(), testutil.ProcCPU(brokerPID), time.Now()
	time.Sleep(10 * time.Second)
	wall := float64(time.Since(wall0))
	idle := float64(cpuTime()-cpu0) / wall * 100
	brokerIdle := float64(testutil.ProcCPU(brokerPID)-brokerCPU0) / wall * 100
	pprof.StopCPUProfile()

	mu.Lock()
	defer mu.Unlock()
	b.ReportMetric(ready.Seconds(), "ready-s")
	b.ReportMetric(pct(first, 0.99).Seconds()*1000, "first-p99-ms")
	if len(later) > 0 {
		b.ReportMetric(pct(later, 0.99).Seconds()*1000, "later-p99-ms")
	}
	b.ReportMetric(pct(lat, 0.50).Seconds()*1000, "p50-ms")
	b.ReportMetric(pct(lat, 0.99).Seconds()*1000, "p99-ms")
	b.ReportMetric(pct(acks, 0.99).Seconds()*1000, "ack-p99-ms")
	b.ReportMetric(idle, "idle-cpu-%")
	b.ReportMetric(brokerIdle, "broker-idle-cpu-%")
	rss, _, err := testutil.ProcMem(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	brokerRSS, _, err := testutil.ProcMem(brokerPID)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MB")
	b.ReportMetric(float64(brokerRSS)/(1<<20), "broker-peak-rss-MB")
	b.ReportMetric(metricValue(b, reg, "onceq_quiet_partitions"), "quiet-partitions")
	b.ReportMetric(0, "ns/op")
	cancel()
	<-runErr
}

// writeHeapProfile writes the live heap to file f.
func writeHeapProfile(b *testing.B, f string) {
	out, err := os.Create(f)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
		b.Fatal(err)
	}
}

// tailSleep is how long the tail handler takes for a task: 500 ms for one
// in a hundred, 1-10 ms for the others, from the task's ID.
func tailSleep(id string) time.Duration {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	if h%100 == 0 {
		return 500 * time.Millisecond
	}
	return time.Duration(1+h%10) * time.Millisecond
}

func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
