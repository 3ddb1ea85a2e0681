package consumer_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
)

var seedFlag = flag.Uint64("seed", 0, "replay a random scenario from this seed (0: a new one)")

// scenarioSteps is how many random operations a scenario runs: 12, or
// ONCEQ_SCENARIO_STEPS (make chaos runs long ones).
func scenarioSteps() int {
	if n, err := strconv.Atoi(os.Getenv("ONCEQ_SCENARIO_STEPS")); err == nil && n > 0 {
		return n
	}
	return 12
}

// TestRandomScenario draws a seeded sequence of operations — produce
// batches of immediate, delayed, duplicate and failing tasks; SIGKILL,
// SIGTERM, add or remove worker processes — and then checks every task
// ended exactly once where it should: the output (never before its due
// time) or the dead letters. The seed is printed; -seed replays it.
func TestRandomScenario(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test ./consumer -run TestRandomScenario -seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 2))

	_, conn := testutil.StartBroker(t, "")
	addr := conn.Brokers[0]
	testutil.CreateTopic(t, conn, "in", 4)
	testutil.CreateTopic(t, conn, "out", 4)
	extra := []string{"--log-level", "info", "--handler", "flaky:out", "--max-attempts", "3", "--backoff-base", "100ms", "--backoff-factor", "2",
		"--backoff-max", "400ms", "--buckets", "100ms,500ms,2s", "--delay-service=true", "--max-buffered", "1000"}
	var slots []*workerProc
	// start runs a worker and waits until it handles signals, so that a
	// SIGTERM drawn next stops it cleanly.
	start := func(dir string) *testutil.Process {
		p := startWorker(t, addr, "scenario", dir, extra...)
		p.WaitOutput(t, "worker started", 30*time.Second)
		return p
	}
	add := func() {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", len(slots)))
		slots = append(slots, &workerProc{dir: dir, proc: start(dir)})
	}
	add()
	add()

	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var succeed, dead []string
	due := map[string]time.Time{}
	next := 0
	produce := func(n int) {
		ctx := context.Background()
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("x-%d", next)
			next++
			task := onceq.Task{ID: id, Queue: "in", Payload: []byte("p")}
			switch k := rng.IntN(10); {
			case k < 2: // delayed up to 3 s
				task.Due = time.Now().Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				due[id] = task.Due.Truncate(time.Millisecond)
			case k < 3:
				task.Headers = []onceq.Header{{Key: "fail", Value: []byte("2")}}
			case k < 4:
				task.Headers = []onceq.Header{{Key: "fail", Value: []byte("always")}}
			}
			if len(task.Headers) > 0 && string(task.Headers[0].Value) == "always" {
				dead = append(dead, id)
			} else {
				succeed = append(succeed, id)
			}
			task.Resolve(time.Now())
			topic := "in"
			if task.DelayedAt(time.Now()) {
				topic = testLadder.Route(time.Now(), task.Due).Topic
			}
			cl.Produce(ctx, task.Record(topic), nil)
			if rng.IntN(20) == 0 && next > 1 { // a duplicate of an earlier task
				dup := onceq.Task{ID: fmt.Sprintf("x-%d", rng.IntN(next-1)), Queue: "in", Payload: []byte("dup")}
				if due[dup.ID].IsZero() {
					dup.Resolve(time.Now())
					cl.Produce(ctx, dup.Record("in"), nil)
				}
			}
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	for step := 0; step < scenarioSteps(); step++ {
		checkRunning(t, slots)
		var op string
		switch k := rng.IntN(10); {
		case k < 4:
			n := 200 + rng.IntN(800)
			produce(n)
			op = fmt.Sprintf("produce %d", n)
		case k < 6:
			i := rng.IntN(len(slots))
			slots[i].proc.Signal(syscall.SIGKILL)
			if _, err := slots[i].proc.Wait(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			slots[i].proc = start(slots[i].dir)
			op = fmt.Sprintf("kill -9 worker %d, restart", i)
		case k < 7:
			i := rng.IntN(len(slots))
			slots[i].proc.Signal(syscall.SIGTERM)
			if code, err := slots[i].proc.Wait(60 * time.Second); err != nil || code != 0 {
				t.Fatalf("worker %d after SIGTERM: exit %d, %v\n%s", i, code, err, tail(slots[i].proc.Output(), 2000))
			}
			slots[i].proc = start(slots[i].dir)
			op = fmt.Sprintf("stop worker %d cleanly, restart", i)
		case k < 8 && len(slots) < 4:
			add()
			op = "add a worker"
		case k < 9 && len(slots) > 1:
			last := slots[len(slots)-1]
			last.proc.Signal(syscall.SIGTERM)
			if code, err := last.proc.Wait(60 * time.Second); err != nil || code != 0 {
				t.Fatalf("leaving worker: exit %d, %v\n%s", code, err, tail(last.proc.Output(), 2000))
			}
			slots = slots[:len(slots)-1]
			op = "remove a worker"
		default:
			op = "wait"
		}
		t.Logf("step %d: %s", step, op)
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
	}
	if len(succeed)+len(dead) == 0 {
		produce(100)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		outs, _ := testutil.ReadCommittedErr(conn, time.Minute, "out")
		dls, _ := testutil.ReadCommittedErr(conn, time.Minute, "onceq-dlq-in")
		if len(outs) >= len(succeed) && len(dls) >= len(dead) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: %d of %d outputs and %d of %d dead letters after 3 minutes", seed, len(outs), len(succeed), len(dls), len(dead))
		}
		checkRunning(t, slots)
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second)
	outs := testutil.ReadCommitted(t, conn, time.Minute, "out")
	checkExactlyOnce(t, outs, succeed)
	if len(dead) > 0 {
		checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "onceq-dlq-in"), dead)
	}
	early := 0
	for _, r := range outs {
		task, _ := onceq.FromRecord(r)
		d, ok := due[task.ID]
		if !ok {
			continue
		}
		for _, h := range task.Headers {
			if h.Key == "started" {
				if ms, _ := strconv.ParseInt(string(h.Value), 10, 64); time.UnixMilli(ms).Before(d) {
					early++
				}
			}
		}
	}
	if early > 0 {
		t.Fatalf("seed %d: %d delayed tasks started before their due time", seed, early)
	}
	t.Logf("%d tasks to the output (%d delayed, none early), %d to the dead letters", len(succeed), len(due), len(dead))
}
