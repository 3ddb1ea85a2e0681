package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/internal/testutil"
)

// crashTasks is the size of the crash tests: 100,000, or 10,000 with -short.
func crashTasks() int {
	if testing.Short() {
		return 10_000
	}
	return 100_000
}

// workerProc is one "onceq worker" subprocess slot that the test kills and
// restarts on the same checkpoint dir.
type workerProc struct {
	dir   string
	proc  *testutil.Process
	kills atomic.Int32 // SIGKILLs by killWhile, read by the tests' producers
}

// awaitKills waits until killWhile has SIGKILLed the workers of slots n
// times, for at most limit: a producer holds its last tasks back until
// then, so that a run that goes fast still crashes mid-run.
func awaitKills(slots []*workerProc, n int32, limit time.Duration) {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var sum int32
		for _, s := range slots {
			sum += s.kills.Load()
		}
		if sum >= n {
			return
		}
	}
}

func startWorker(t *testing.T, addr, group, dir string, extra ...string) *testutil.Process {
	args := []string{"worker", "--brokers", addr, "--group", group, "--handler", "count:out",
		"--checkpoint-dir", dir, "--metrics-addr", "", "--session-timeout", "6s", "--transaction-timeout", "5s",
		"--commit-interval", "50ms", "--log-level", "warn", "--delay-service=false"}
	if !slices.Contains(extra, "--queue") {
		args = append(args, "--queue", "in")
	}
	return testutil.Start(t, append(args, extra...)...)
}

// startThreeWorkers creates the queue "in" and the output "out", of 8
// partitions each, on the broker at addr, and starts three workers of
// group (startWorker, with extra), each on a checkpoint dir of its own.
func startThreeWorkers(t *testing.T, addr, group string, extra ...string) (broker.Conn, []*workerProc) {
	conn := broker.Conn{Brokers: []string{addr}}
	testutil.CreateTopic(t, conn, "in", 8)
	testutil.CreateTopic(t, conn, "out", 8)
	slots := make([]*workerProc, 3)
	for i := range slots {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", i))
		slots[i] = &workerProc{dir: dir, proc: startWorker(t, addr, group, dir, extra...)}
	}
	return conn, slots
}

// TestCrashCopyExactlyOnce runs tasks through three worker processes while
// one of them, chosen at random, is SIGKILLed and restarted every 1-3 s.
// A fresh read_committed reader must see every ID exactly once, and the
// per-ID run counters in the changelog must each be 1.
func TestCrashCopyExactlyOnce(t *testing.T) {
	runCrash(t, crashTasks(), 0, nil)
}

// TestCrashCopyWithDuplicates is the same with 5% of the IDs submitted
// twice: every ID must still execute once.
func TestCrashCopyWithDuplicates(t *testing.T) {
	runCrash(t, crashTasks(), 0.05, nil)
}

// TestCrashCopyOnMovingLeaders is TestCrashCopyExactlyOnce on a three-node
// "onceq broker" process whose partition leaders and group and
// transaction coordinators move every second, with 5,000 tasks: the
// workers' kills meet elections.
func TestCrashCopyOnMovingLeaders(t *testing.T) {
	runCrash(t, 5000, 0, []string{"--nodes", "3", "--move-leaders-every", "1s"})
}

// runCrash is a crashRunOn of n tasks, of which the fraction dupFraction
// is submitted twice, on the broker of brokerArgs.
func runCrash(t *testing.T, n int, dupFraction float64, brokerArgs []string) {
	if testing.Short() && dupFraction > 0 {
		t.Skip("the duplicate variant runs in the full suite")
	}
	rng := seededRand(t)
	all := ids(n)
	submitted := make([]onceq.Task, 0, len(all))
	for _, id := range all {
		submitted = append(submitted, onceq.Task{ID: id, Payload: []byte("payload-" + id)})
	}
	for _, task := range submitted[:len(all)] {
		if rng.Float64() < dupFraction {
			submitted = append(submitted, task)
		}
	}
	rng.Shuffle(len(submitted), func(i, j int) { submitted[i], submitted[j] = submitted[j], submitted[i] })
	crashRunOn(t, rng, brokerArgs, submitted, all)
}

// seededRand returns the random source of a test, from the clock or from
// ONCEQ_SEED, and logs its seed.
func seededRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ONCEQ_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("ONCEQ_SEED=%q: want an unsigned integer", s)
		}
	}
	t.Logf("seed %d (replay with ONCEQ_SEED=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// crashRun is crashRunOn the embedded broker in the test's process.
func crashRun(t *testing.T, rng *rand.Rand, tasks []onceq.Task, want []string, extra ...string) {
	crashRunOn(t, rng, nil, tasks, want, extra...)
}

// crashRunOn submits tasks to the queue "in" of a fresh broker, spread over
// about 15 s, while three "onceq worker" processes of one group (with the
// count:out handler and the extra flags) run them and one of them, chosen
// by rng, is SIGKILLed and restarted every 1-3 s. A fresh read_committed
// reader must then see every ID of want exactly once in "out", and the
// per-ID run counters in the changelog must each be 1. The broker is the
// embedded one in the test's process when brokerArgs is nil, and otherwise
// an "onceq broker" process in memory, on free ports, with brokerArgs.
func crashRunOn(t *testing.T, rng *rand.Rand, brokerArgs []string, tasks []onceq.Task, want []string, extra ...string) {
	var addr string
	if brokerArgs == nil {
		_, conn := testutil.StartBroker(t, "")
		addr = conn.Brokers[0]
	} else {
		_, addr = testutil.StartBrokerProcess(t, "127.0.0.1:0", "", brokerArgs...)
	}
	const group = "crash"
	conn, slots := startThreeWorkers(t, addr, group, extra...)
	n := len(want)
	// Submit while the workers run, spread over about 15 s, so that many
	// kills land in the middle of the work.
	go func() {
		wave := max(len(tasks)/100, 1)
		for i := 0; i < len(tasks); i += wave {
			produceQuiet(conn, "in", tasks[i:min(i+wave, len(tasks))])
			time.Sleep(150 * time.Millisecond)
		}
	}()

	kills := killUntil(t, rng, conn, slots, n, 6*time.Minute, func(dir string) *testutil.Process {
		return startWorker(t, addr, group, dir, extra...)
	})
	t.Logf("%d tasks (%d submitted), %d kills", n, len(tasks), kills)
	if kills < 3 {
		t.Fatalf("only %d kills: the run was too short to test crashes", kills)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "out"), want)
	checkRunCounters(t, conn, broker.ChangelogTopic(group, "in"), want)
}

// killUntil SIGKILLs one of slots, chosen by rng, every 1-3 s and
// restarts it with start, until "out" holds n records (counted by a
// read_committed reader), failing the test after limit (killWhile);
// then it stops every worker with SIGTERM, which must exit 0. It returns
// the kills.
func killUntil(t *testing.T, rng *rand.Rand, conn broker.Conn, slots []*workerProc, n int, limit time.Duration, start func(dir string) *testutil.Process) int {
	t.Helper()
	return killWhile(t, rng, conn, slots, limit, start, func() (int, bool, string) {
		// Offsets count transaction markers too: confirm with a reader.
		got := countRecords(t, conn, "out")
		if got >= n {
			got = len(testutil.ReadCommitted(t, conn, time.Minute, "out"))
		}
		return got, got >= n, fmt.Sprintf("%d of %d outputs", got, n)
	})
}

// killWhile SIGKILLs one of slots, chosen by rng, every 1-3 s and
// restarts it with start, until progress says the run is done. progress
// counts what the run has finished so far and describes it. The test
// fails after limit, or after two minutes in which nothing finished,
// with the workers' logs and the broker's groups and transactions.
//
// A kill comes only once something has finished since the last one:
// kills faster than the workers recover from them would test nothing but
// the group protocol's patience. (Under load a static member notices a
// rebalance only at its next heartbeat, up to 3 s later; a member
// replaced every 2 s keeps its group in rebalance for good.)
//
// Then it stops every worker (stopWorkers). It returns the kills.
func killWhile(t *testing.T, rng *rand.Rand, conn broker.Conn, slots []*workerProc, limit time.Duration,
	start func(dir string) *testutil.Process, progress func() (finished int, done bool, status string)) int {
	t.Helper()
	begin := time.Now()
	kills, killedAt, last, lastMoved := 0, -1, 0, begin
	var trail []string // the status at each look, shown if the run never ends
	for {
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		n, done, status := progress()
		if done {
			break
		}
		trail = append(trail, fmt.Sprintf("%.0fs: %s", time.Since(begin).Seconds(), status))
		if n > last {
			last, lastMoved = n, time.Now()
		}
		if time.Since(begin) > limit || time.Since(lastMoved) > 2*time.Minute {
			for _, s := range slots {
				t.Logf("worker %s:\n%s", s.dir, tail(s.proc.Output(), 3000))
			}
			t.Logf("broker:\n%s", testutil.BrokerState(conn))
			t.Fatalf("after %v, %v of them without progress, and %d kills: %s; at each look: %s",
				time.Since(begin).Round(time.Second), time.Since(lastMoved).Round(time.Second), kills, status, strings.Join(trail, ", "))
		}
		checkRunning(t, slots)
		if n <= killedAt {
			continue // not yet recovered from the last kill
		}
		s := slots[rng.IntN(len(slots))]
		s.proc.Signal(syscall.SIGKILL)
		if _, err := s.proc.Wait(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		kills, killedAt = kills+1, n
		s.kills.Add(1)
		s.proc = start(s.dir)
	}
	stopWorkers(t, slots)
	return kills
}

// stopWorkers stops every worker of slots with SIGTERM, a second after
// the run's last output: each must exit 0.
func stopWorkers(t *testing.T, slots []*workerProc) {
	t.Helper()
	time.Sleep(time.Second) // a duplicate would land after the originals
	for _, s := range slots {
		s.proc.Signal(syscall.SIGTERM)
	}
	for _, s := range slots {
		code, err := s.proc.Wait(60 * time.Second)
		if err != nil {
			// Still running: SIGQUIT makes the Go runtime print every
			// goroutine's stack, which says where the stop is stuck.
			s.proc.Signal(syscall.SIGQUIT)
			_, _ = s.proc.Wait(10 * time.Second)
			t.Errorf("worker exit %d (%v); its goroutines:\n%s", code, err, tail(s.proc.Output(), 30000))
		} else if code != 0 {
			t.Errorf("worker exit %d:\n%s", code, tail(s.proc.Output(), 2000))
		}
	}
}

// checkRunCounters reads the changelog as any reader would and checks
// that the last value of every runs/<id> state key is 1.
func checkRunCounters(t *testing.T, conn broker.Conn, changelog string, want []string) {
	t.Helper()
	last := map[string]string{}
	for _, r := range testutil.ReadCommitted(t, conn, time.Minute, changelog) {
		e, err := checkpoint.DecodeChangelog(r.Key, r.Value)
		if err != nil {
			t.Fatalf("changelog offset %d: %v", r.Offset, err)
		}
		if e.Kind == checkpoint.KindState {
			last[string(e.Key)] = string(e.Value)
		}
	}
	sum, above := 0, 0
	for _, id := range want {
		v, err := strconv.Atoi(last["runs/"+id])
		if err != nil {
			continue
		}
		sum += v
		if v > 1 {
			above++
		}
	}
	if sum != len(want) || above != 0 {
		t.Fatalf("run counters sum to %d (want %d), %d above 1", sum, len(want), above)
	}
}

// produceTasksQuiet writes a task for each ID to queue, ignoring errors.
func produceTasksQuiet(conn broker.Conn, queue string, ids []string) {
	tasks := make([]onceq.Task, len(ids))
	for i, id := range ids {
		tasks[i] = onceq.Task{ID: id, Payload: []byte("payload-" + id)}
	}
	produceQuiet(conn, queue, tasks)
}

// produceQuiet writes tasks to queue, enqueued now, ignoring errors: the
// checks that follow count what arrived.
func produceQuiet(conn broker.Conn, queue string, tasks []onceq.Task) {
	cl, err := conn.NewClient()
	if err != nil {
		return
	}
	defer cl.Close()
	ctx := context.Background()
	for _, task := range tasks {
		task.Queue = queue
		task.Resolve(time.Now())
		cl.Produce(ctx, task.Record(onceq.QueueTopic(queue)), nil)
	}
	_ = cl.Flush(ctx)
}

func countRecords(t *testing.T, conn broker.Conn, topic string) int {
	n, err := stableCount(conn, topic)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}

// checkRunning fails the test if a worker exited on its own.
func checkRunning(t *testing.T, slots []*workerProc) {
	t.Helper()
	for _, s := range slots {
		if s.proc.Exited() {
			t.Fatalf("a worker exited by itself:\n%s", tail(s.proc.Output(), 3000))
		}
	}
}
