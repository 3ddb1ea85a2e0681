package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCrashRetriesAndDeadLetters runs every failure rule at once through
// three worker processes (each with its delay service) while one of them
// is SIGKILLed and restarted every 1-3 s. A sixth of the tasks each:
// succeed, fail twice and then succeed, fail always, fail with SkipRetry,
// time out on their first attempt and then succeed, or are expired when
// submitted. Every task must end in exactly one place, once: the output, or
// the dead letters with its reason (the last of three attempts, a skipped
// retry, or expiry before its first run).
func TestCrashRetriesAndDeadLetters(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	crashRetries(t, conn, "in", 20_000)
}

// TestCrashRetriesOnLane is TestCrashRetriesAndDeadLetters with the tasks
// of lane queue in/retry, on lane in: its retries go back to the lane
// through the delay topics, its dead letters and records are the lane's
// and name the lane queue.
func TestCrashRetriesOnLane(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	crashRetries(t, conn, "in/retry", 6_000)
}

// TestCrashRetriesOnMovingLeaders is TestCrashRetriesAndDeadLetters on
// three nodes whose partition leaders and coordinators move every second.
func TestCrashRetriesOnMovingLeaders(t *testing.T) {
	testutil.NeedsEmbedded(t, "moves partition leaders on demand")
	emb, err := embedded.Start(embedded.Config{Nodes: 3, MoveLeadersEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	crashRetries(t, broker.Conn{Brokers: emb.Addrs()}, "in", 20_000)
}

// crashRetries runs n tasks (3,000 with -short) of queue, on topic in.
func crashRetries(t *testing.T, conn broker.Conn, queue string, n int) {
	if testing.Short() {
		n = min(n, 3_000)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	addr := conn.Brokers[0]
	testutil.CreateTopic(t, conn, "in", 4)
	testutil.CreateTopic(t, conn, "out", 4)

	var succeed, dead []string
	wantDead := map[string]string{} // ID -> the start of its onceq-error
	recs := make([]onceq.Task, 0, n)
	fail := func(v string) []onceq.Header { return []onceq.Header{{Key: "fail", Value: []byte(v)}} }
	for i := 0; i < n; i++ {
		task := onceq.Task{ID: fmt.Sprintf("r-%d", i), Queue: queue, Payload: []byte("p")}
		switch i % 6 {
		case 1:
			task.Headers = fail("2")
		case 2:
			task.Headers, wantDead[task.ID] = fail("always"), "max_attempts: attempt 3 of 3: "
		case 3:
			task.Headers, wantDead[task.ID] = fail("skip"), "failed: "
		case 4:
			task.Headers, task.Timeout = fail("timeout"), 200*time.Millisecond
		case 5:
			task.Enqueued, task.Expires, wantDead[task.ID] = time.Now().Add(-2*time.Minute), time.Now().Add(-time.Minute), "expired: "
		}
		if _, ok := wantDead[task.ID]; ok {
			dead = append(dead, task.ID)
		} else {
			succeed = append(succeed, task.ID)
		}
		recs = append(recs, task)
	}
	extra := []string{"--handler", "flaky:out", "--max-attempts", "3", "--backoff-base", "200ms", "--backoff-factor", "1",
		"--backoff-max", "200ms", "--buckets", "100ms,500ms,2s", "--delay-service=true", "--queue", queue}
	slots := make([]*workerProc, 3)
	for i := range slots {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", i))
		slots[i] = &workerProc{dir: dir, proc: startWorker(t, addr, "retry", dir, extra...)}
	}
	go func() {
		cl, err := conn.NewClient()
		if err != nil {
			return
		}
		defer cl.Close()
		for i, task := range recs {
			if i == 3*n/4 {
				awaitKills(slots, 3, 2*time.Minute)
			}
			task.Resolve(time.Now())
			cl.Produce(context.Background(), task.Record("in"), nil)
			if i%(n/40) == n/40-1 { // spread over about 10 s, so that kills land mid-run
				time.Sleep(250 * time.Millisecond)
			}
		}
		_ = cl.Flush(context.Background())
	}()

	kills := killWhile(t, rng, conn, slots, 5*time.Minute, func(dir string) *testutil.Process {
		return startWorker(t, addr, "retry", dir, extra...)
	}, func() (int, bool, string) {
		outs, _ := testutil.ReadCommittedErr(conn, time.Minute, "out")
		dls, _ := testutil.ReadCommittedErr(conn, time.Minute, "onceq-dlq-in")
		return len(outs) + len(dls), len(outs) >= len(succeed) && len(dls) >= len(dead),
			fmt.Sprintf("%d of %d outputs, %d of %d dead letters", len(outs), len(succeed), len(dls), len(dead))
	})
	t.Logf("%d tasks, %d kills", n, kills)
	if kills < 3 {
		t.Fatalf("only %d kills: the run was too short to test crashes", kills)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "out"), succeed)
	records := taskRecords(t, testutil.ReadCommitted(t, conn, time.Minute, broker.RecordsTopic("in")))
	for id, rs := range records {
		for _, r := range rs {
			if r.Queue != queue {
				t.Fatalf("a task record of %s names queue %q, want %q", id, r.Queue, queue)
			}
		}
	}
	checkCrashTaskRecords(t, records, n)
	dls := testutil.ReadCommitted(t, conn, time.Minute, "onceq-dlq-in")
	checkExactlyOnce(t, dls, dead)
	for _, r := range dls {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if task.Queue != queue {
			t.Fatalf("dead letter %s names queue %q, want %q", task.ID, task.Queue, queue)
		}
		want := wantDead[task.ID]
		if !strings.HasPrefix(task.LastError, want) {
			t.Fatalf("dead letter %s: onceq-error %q, want it to start with %q", task.ID, task.LastError, want)
		}
		if attempts := map[bool]int{true: 3, false: 1}[strings.HasPrefix(want, "max_attempts")]; task.Attempt != attempts {
			t.Fatalf("dead letter %s (%s) after attempt %s, want %d", task.ID, want, strconv.Itoa(task.Attempt), attempts)
		}
	}
}

// checkCrashTaskRecords checks the task records of TestCrashRetriesAndDeadLetters
// against what its tasks went through, as a read_committed reader sees
// them: each task's life, record by record (retrying for each failed
// attempt, then one final state), the result of a success (the flaky:
// handler's run count, which must be 1) and the reason of a dead task.
// The output and the dead letters are checked apart; the records agree with
// them: a task with an output has one succeeded record, one dead-lettered
// one dead or expired record, none both.
func checkCrashTaskRecords(t *testing.T, byID map[string][]onceq.TaskRecord, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("r-%d", i)
		want := map[int]string{
			0: "succeeded#1",
			1: "retrying#1 retrying#2 succeeded#3",
			2: "retrying#1 retrying#2 dead#3",
			3: "dead#1",
			4: "retrying#1 succeeded#2",
			5: "expired#1",
		}[i%6]
		recs := byID[id]
		if got := states(recs); got != want {
			t.Fatalf("task records of %s: %s, want %s", id, got, want)
		}
		last := recs[len(recs)-1]
		switch last.State {
		case onceq.StateSucceeded:
			if wantResult := string(handlers.CountResult(1, last.Attempt)); string(last.Result) != wantResult {
				t.Fatalf("%s succeeded with result %q, want %q", id, last.Result, wantResult)
			}
		case onceq.StateDead, onceq.StateExpired:
			if last.Reason == "" || last.Error == "" || last.Result != nil {
				t.Fatalf("%s %s: reason %q, error %q, result %q", id, last.State, last.Reason, last.Error, last.Result)
			}
		}
		for _, r := range recs[:len(recs)-1] {
			if r.Due.Before(r.Finished) || r.Error == "" {
				t.Fatalf("%s: retrying record due %v before its failure at %v, or without error %q", id, r.Due, r.Finished, r.Error)
			}
		}
		delete(byID, id)
	}
	if len(byID) > 0 {
		t.Fatalf("task records of %d IDs that were never submitted", len(byID))
	}
}
