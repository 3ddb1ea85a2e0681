// Command drainguard compares the drain of a pre-loaded queue by `onceq
// worker` built from two trees: the working tree (head) and a base commit.
// It builds both binaries, starts one embedded broker (head's) on a
// temporary data dir, pre-loads 100-byte tasks with generated IDs and with
// client IDs, and then, round after round, drains them with a worker
// process of each binary in turn (the order alternates), exactly-once with
// both kinds of IDs and at-least-once. Each round also runs franz-go's own
// exactly-once copy loop (bench.CopyLoop) in this process as the floor.
//
// With -brokers it runs on that cluster (Apache Kafka, say) instead of its
// own embedded broker, its topics and groups named after the run so that
// runs never meet; it leaves them behind.
//
// For each run it prints the rate (tasks a second, from the worker's start
// to the group's commit of the last task), the CPU the worker process used
// per task (user and system, from its rusage, start-up included) and its
// peak resident set; at the end, the median of each and head's ratio to
// base. A ratio is
// measured side by side, so load from elsewhere falls on both.
//
//	go run ./internal/drainguard -base e81b932
//	make bench-drain BASE=e81b932
//	go run ./internal/drainguard -base e81b932 -brokers 127.0.0.1:9092
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/broker"
)

func main() {
	base := flag.String("base", "", "the commit to compare the working tree with (required)")
	tasks := flag.Int("tasks", 1_000_000, "tasks pre-loaded in each queue")
	rounds := flag.Int("rounds", 3, "rounds; each runs every drain of both binaries once")
	kinds := flag.String("runs", "eos-keys,eos,alo", "drains to run: eos-keys (exactly-once, client IDs), eos (exactly-once, generated IDs), alo (at-least-once)")
	partitions := flag.Int("partitions", 8, "partitions of the queues")
	headArgs := flag.String("head-args", "", "more flags for head's workers, space-separated (to try a setting out)")
	profile := flag.String("profile", "", "write a CPU profile of each of head's drains of the first round to this directory (5 s, from 1 s after the worker starts), and a heap profile at its end")
	brokers := flag.String("brokers", "", "seed brokers of a cluster to run on, comma-separated (default: an embedded broker of its own)")
	flag.Parse()
	if *base == "" || *tasks < 1000 || *rounds < 1 || *partitions < 1 {
		fmt.Fprintln(os.Stderr, "drainguard: -base is required (a commit, such as HEAD~1); -tasks at least 1000; -rounds and -partitions at least 1")
		os.Exit(2)
	}
	var runs []drainKind
	for _, k := range strings.Split(*kinds, ",") {
		d, ok := drainKinds[k]
		if !ok {
			fmt.Fprintf(os.Stderr, "drainguard: -runs: unknown drain %q: use eos-keys, eos or alo\n", k)
			os.Exit(2)
		}
		runs = append(runs, d)
	}
	extra := map[string][]string{"head": strings.Fields(*headArgs)}
	var seeds []string
	if *brokers != "" {
		seeds = strings.Split(*brokers, ",")
		prefix = fmt.Sprintf("dg%d-", time.Now().Unix())
	}
	if err := run(*base, *tasks, *rounds, *partitions, runs, extra, *profile, seeds); err != nil {
		fmt.Fprintln(os.Stderr, "drainguard:", err)
		os.Exit(1)
	}
}

// prefix starts the names of the run's topics and groups: empty on its
// own broker, the run's own on a cluster given with -brokers.
var prefix string

// drainKind is one way of draining: a queue and a guarantee.
type drainKind struct {
	name, queue, guarantee string
}

var drainKinds = map[string]drainKind{
	"eos-keys": {"eos-keys", "drain-keys", "exactly-once"},
	"eos":      {"eos", "drain", "exactly-once"},
	"alo":      {"alo", "drain", "at-least-once"},
}

// result is one drain's figures.
type result struct {
	rate     float64 // tasks a second
	cpuPerUS float64 // CPU microseconds per task
	rssMB    float64 // the worker's peak resident set, MiB (0: not measured)
}

func run(base string, n, rounds, partitions int, kinds []drainKind, extra map[string][]string, profile string, seeds []string) error {
	tmp, err := os.MkdirTemp("", "drainguard-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bins, cleanup, err := build(tmp, base)
	defer cleanup()
	if err != nil {
		return err
	}
	ctx := context.Background()
	conn := broker.Conn{Brokers: seeds}
	if len(seeds) == 0 {
		addr, stopBroker, err := startBroker(bins["head"], filepath.Join(tmp, "broker"))
		if err != nil {
			return err
		}
		defer stopBroker()
		conn.Brokers = []string{addr}
	} else {
		fmt.Printf("on the cluster of %s, topics and groups named %s*\n", strings.Join(seeds, ","), prefix)
	}
	if err := preload(ctx, conn, n, int32(partitions)); err != nil {
		return err
	}
	names := []string{"base", "head"}
	all := map[string][]result{} // by binary and kind
	var floor []result
	for r := range rounds {
		took, cpu, err := copyLoop(ctx, conn, n, int32(partitions), r)
		if err != nil {
			return err
		}
		fl := result{rate: float64(n) / took.Seconds(), cpuPerUS: float64(cpu.Microseconds()) / float64(n)}
		floor = append(floor, fl)
		fmt.Printf("round %d  %-22s %9.0f tasks/s  %6.2f us CPU/task\n", r+1, "franz-go copy loop", fl.rate, fl.cpuPerUS)
		for i := range names {
			bin := names[(r+i)%len(names)]
			for _, k := range kinds {
				prof := ""
				if profile != "" && bin == "head" && r == 0 {
					prof = filepath.Join(profile, k.name+".pprof")
				}
				res, err := drain(ctx, conn, bins[bin], k, n, filepath.Join(tmp, fmt.Sprintf("%s-%s-%d", bin, k.name, r)), extra[bin], prof)
				if err != nil {
					return fmt.Errorf("%s %s: %w", bin, k.name, err)
				}
				key := bin + " " + k.name
				all[key] = append(all[key], res)
				fmt.Printf("round %d  %-22s %9.0f tasks/s  %6.2f us CPU/task  %4.0f MiB peak RSS\n", r+1, key, res.rate, res.cpuPerUS, res.rssMB)
			}
		}
	}
	fmt.Printf("\nmedians of %d rounds, %d tasks each (base %s)\n", rounds, n, base)
	fmt.Printf("%-10s %12s %12s %8s %10s %10s %8s %14s %9s %9s\n", "drain", "base/s", "head/s", "head/base", "base us", "head us", "head/base", "head CPU/floor", "base RSS", "head RSS")
	flCPU := median(floor, func(r result) float64 { return r.cpuPerUS })
	for _, k := range kinds {
		b, h := all["base "+k.name], all["head "+k.name]
		br, hr := median(b, rateOf), median(h, rateOf)
		bc, hc := median(b, cpuOf), median(h, cpuOf)
		fmt.Printf("%-10s %12.0f %12.0f %8.2fx %10.2f %10.2f %8.2fx %13.2fx %6.0f MiB %6.0f MiB\n", k.name, br, hr, hr/br, bc, hc, hc/bc, hc/flCPU,
			median(b, rssOf), median(h, rssOf))
	}
	fmt.Printf("%-10s %12.0f (franz-go copy loop, %.2f us CPU/task)\n", "floor", median(floor, rateOf), flCPU)
	return nil
}

func rateOf(r result) float64 { return r.rate }
func cpuOf(r result) float64  { return r.cpuPerUS }
func rssOf(r result) float64  { return r.rssMB }

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	return v[len(v)/2]
}

// build builds onceq from the working tree and from base (in a worktree
// of its own under tmp), and returns the binaries by name; cleanup
// removes the worktree.
func build(tmp, base string) (map[string]string, func(), error) {
	src := filepath.Join(tmp, "base-src")
	cleanup := func() {
		_ = exec.Command("git", "worktree", "remove", "--force", src).Run()
	}
	bins := map[string]string{"head": filepath.Join(tmp, "head", "onceq"), "base": filepath.Join(tmp, "base", "onceq")}
	fmt.Printf("building head (the working tree) and base (%s)\n", base)
	if out, err := exec.Command("go", "build", "-o", bins["head"], "./cmd/onceq").CombinedOutput(); err != nil {
		return nil, cleanup, fmt.Errorf("building head: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "worktree", "add", "--detach", src, base).CombinedOutput(); err != nil {
		return nil, cleanup, fmt.Errorf("checking out %s: %v\n%s", base, err, out)
	}
	cmd := exec.Command("go", "build", "-o", bins["base"], "./cmd/onceq")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, cleanup, fmt.Errorf("building base: %v\n%s", err, out)
	}
	return bins, cleanup, nil
}

var listening = regexp.MustCompile(`broker listening"? addr=(\S+)`)

// startBroker starts `onceq broker` on a free port and returns its
// address.
func startBroker(bin, dir string) (string, func(), error) {
	cmd := exec.Command(bin, "broker", "--listen", "127.0.0.1:0", "--data-dir", dir)
	out, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case addr := <-found:
		return addr, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("the broker did not say it was listening within 30 s")
	}
}

// preload writes n tasks to each queue of the drains.
func preload(ctx context.Context, conn broker.Conn, n int, partitions int32) error {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	start := time.Now()
	for _, q := range []struct {
		name      string
		generated bool
	}{{"drain", true}, {"drain-keys", false}} {
		if err := adm.CreateTopic(ctx, prefix+q.name, partitions, nil); err != nil {
			return err
		}
		if err := bench.Preload(ctx, conn, prefix+q.name, n, q.generated); err != nil {
			return err
		}
	}
	fmt.Printf("pre-loaded 2 x %d tasks in %v\n", n, time.Since(start).Round(time.Millisecond))
	return nil
}

// drain runs one worker process of bin over k's queue in a new group until
// the group committed n tasks, stops it, and returns its figures.
func drain(ctx context.Context, conn broker.Conn, bin string, k drainKind, n int, dir string, extra []string, profile string) (result, error) {
	group := prefix + "g-" + filepath.Base(dir)
	metrics := ""
	if profile != "" {
		var err error
		if metrics, err = freeAddr(); err != nil {
			return result{}, err
		}
		extra = append(extra, "--pprof")
	}
	args := append([]string{"worker", "--brokers", strings.Join(conn.Brokers, ","), "--queue", prefix + k.queue, "--group", group,
		"--checkpoint-dir", dir, "--handler", "noop", "--guarantee", k.guarantee, "--metrics-addr", metrics,
		"--delay-service=false", "--workflow-service=false", "--scheduler=false", "--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	profiled := make(chan error, 1)
	if profile != "" {
		go func() { profiled <- fetchProfile(metrics, profile) }()
	} else {
		profiled <- nil
	}
	wait, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	committed := make(chan error, 1)
	go func() { committed <- bench.WaitCommitted(wait, conn, group, int64(n)) }()
	select {
	case err := <-exited:
		return result{}, fmt.Errorf("the worker exited before it was through: %v\n%s", err, stderr.String())
	case err := <-committed:
		if err != nil {
			_ = cmd.Process.Kill()
			<-exited
			return result{}, err
		}
	}
	took := time.Since(start)
	// The peak from /proc, not the rusage's: a child's ru_maxrss counts
	// the parent's pages it shared before exec.
	rss := peakRSS(cmd.Process.Pid)
	if err := <-profiled; err != nil {
		fmt.Fprintf(os.Stderr, "drainguard: no profile of %s: %v\n", k.name, err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		return result{}, fmt.Errorf("the worker's shutdown: %v\n%s", err, stderr.String())
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return result{}, errors.New("no rusage for the worker process")
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return result{float64(n) / took.Seconds(), float64(cpu.Microseconds()) / float64(n), rss}, nil
}

// peakRSS is process pid's peak resident set (VmHWM) in MiB, 0 when /proc
// cannot tell.
func peakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// fetchProfile writes to file a CPU profile of the worker whose metrics
// listener is addr: 5 s from 1 s after its start, and its heap at the end
// of that window (file.heap.pprof).
func fetchProfile(addr, file string) error {
	time.Sleep(time.Second)
	if err := fetchTo(addr, "/debug/pprof/profile?seconds=5", file); err != nil {
		return err
	}
	// The heap at the end of that window, while the drain runs.
	return fetchTo(addr, "/debug/pprof/heap", strings.TrimSuffix(file, ".pprof")+".heap.pprof")
}

// fetchTo writes what addr serves at path to file.
func fetchTo(addr, path, file string) error {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s answered %s", addr, path, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// copyLoop copies the generated-ID queue with franz-go's copy loop in this
// process and returns the time and the CPU it took.
func copyLoop(ctx context.Context, conn broker.Conn, n int, partitions int32, round int) (time.Duration, time.Duration, error) {
	out := fmt.Sprintf("%sdrain-copy-%d", prefix, round)
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return 0, 0, err
	}
	err = adm.CreateTopic(ctx, out, partitions, nil)
	adm.Close()
	if err != nil {
		return 0, 0, err
	}
	before := cpuTime()
	took, err := bench.CopyLoop(ctx, conn, prefix+"drain", out, "copy-"+out, n, nil)
	return took, cpuTime() - before, err
}

// cpuTime is the CPU this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
