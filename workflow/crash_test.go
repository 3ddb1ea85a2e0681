package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/workflow"
)

// crashSizes are the chords (of 10 members), chains (of 5 steps) and
// dependency pairs of TestCrashWorkflows: the 1,000, 1,000 and
// 500, or a tenth with -short.
func crashSizes() (chords, chains, pairs int) {
	if testing.Short() {
		return 100, 100, 50
	}
	return 1000, 1000, 500
}

// TestCrashWorkflows runs chords, chains and dependency pairs through
// three onceq worker processes (each with its delay and workflow
// services) while one of them, at random, is SIGKILLed and restarted
// every 1-3 s, and a fifth of the tasks fail once or twice before they
// succeed. Then, from a fresh read_committed reader of the handlers'
// output and of the task records:
//   - every task ran to success once (one output, its run counter 1);
//   - every chord's callback ran once, with all 10 members' results;
//   - every chain's steps ran once each, in order (each step's input is
//     the result of the one before it);
//   - every dependent task B started after its A finished, once, whichever
//     of the two was submitted first.
func TestCrashWorkflows(t *testing.T) {
	chords, chains, pairs := crashSizes()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ONCEQ_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (ONCEQ_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	_, conn := testutil.StartBroker(t, "")
	addr := conn.Brokers[0]
	testutil.CreateTopic(t, conn, "in", 4)
	testutil.CreateTopic(t, conn, "out", 4)

	flaky := func() []onceq.Header {
		switch rng.IntN(10) {
		case 0:
			return []onceq.Header{{Key: handlers.FailHeader, Value: []byte("1")}}
		case 1:
			return []onceq.Header{{Key: handlers.FailHeader, Value: []byte("2")}}
		}
		return nil
	}
	step := func(id string) workflow.Node {
		return workflow.Task(onceq.Task{Queue: "in", ID: id, Headers: flaky(), Payload: []byte(id)})
	}
	var submits []func(context.Context, *producer.Producer) error
	wf := func(id string, n workflow.Node) {
		submits = append(submits, func(ctx context.Context, p *producer.Producer) error {
			_, err := workflow.Submit(ctx, p, id, n)
			return err
		})
	}
	for i := range chords {
		members := make([]workflow.Node, 10)
		for m := range members {
			members[m] = step(fmt.Sprintf("c%d.m%d", i, m))
		}
		wf(fmt.Sprintf("c%d", i), workflow.Chord(workflow.Group(members...), step(fmt.Sprintf("c%d.cb", i))))
	}
	for i := range chains {
		steps := make([]workflow.Node, 5)
		for s := range steps {
			steps[s] = step(fmt.Sprintf("ch%d.s%d", i, s))
		}
		wf(fmt.Sprintf("ch%d", i), workflow.Chain(steps...))
	}
	for i := range pairs {
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		wf("", step(b).After(workflow.Ref{Queue: "in", ID: a}))
		headers := flaky()
		submits = append(submits, func(ctx context.Context, p *producer.Producer) error {
			_, err := p.Submit(ctx, onceq.Task{Queue: "in", ID: a, Headers: headers, Payload: []byte(a)})
			return err
		})
	}
	rng.Shuffle(len(submits), func(i, j int) { submits[i], submits[j] = submits[j], submits[i] })
	want := chords*11 + chains*5 + pairs*2

	extra := []string{"--queue", "in", "--handler", "flaky:out", "--metrics-addr", "", "--session-timeout", "6s",
		"--transaction-timeout", "5s", "--commit-interval", "50ms", "--log-level", "warn", "--max-attempts", "5",
		"--backoff-base", "200ms", "--backoff-factor", "1", "--backoff-max", "200ms", "--buckets", "100ms,500ms,2s"}
	start := func(dir string) *testutil.Process {
		return testutil.Start(t, append([]string{"worker", "--brokers", addr, "--group", "wf", "--checkpoint-dir", dir}, extra...)...)
	}
	type slot struct {
		dir  string
		proc *testutil.Process
	}
	slots := make([]*slot, 3)
	for i := range slots {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", i))
		slots[i] = &slot{dir: dir, proc: start(dir)}
	}

	p, err := producer.New(producer.Conn(conn), producer.Buckets(100*time.Millisecond, 500*time.Millisecond, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	submitted := make(chan error, 1)
	go func() { // spread over about 10 s, so that kills land mid-run
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, len(submits))
		per := max(len(submits)/40, 1)
		for i, s := range submits {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- s(ctx, p)
			}()
			if i%per == per-1 {
				time.Sleep(250 * time.Millisecond)
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				submitted <- err
				return
			}
		}
		submitted <- nil
	}()

	kills := 0
	deadline := time.Now().Add(6 * time.Minute)
	var outs []*kgo.Record
	for {
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		select {
		case err := <-submitted:
			if err != nil {
				t.Fatalf("submitting: %v", err)
			}
		default:
		}
		outs, _ = testutil.ReadCommittedErr(conn, time.Minute, "out")
		if len(outs) >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 6 minutes: %d of %d outputs (%d kills)", len(outs), want, kills)
		}
		for _, s := range slots {
			if s.proc.Exited() {
				t.Fatalf("a worker exited by itself:\n%s", s.proc.Output())
			}
		}
		s := slots[rng.IntN(len(slots))]
		s.proc.Signal(syscall.SIGKILL)
		if _, err := s.proc.Wait(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		kills++
		s.proc = start(s.dir)
	}
	time.Sleep(2 * time.Second) // late duplicates would land by now
	for _, s := range slots {
		s.proc.Signal(syscall.SIGTERM)
	}
	for _, s := range slots {
		if code, err := s.proc.Wait(60 * time.Second); err != nil || code != 0 {
			t.Errorf("worker exit %d (%v):\n%s", code, err, s.proc.Output())
		}
	}
	outs = testutil.ReadCommitted(t, conn, time.Minute, "out")
	t.Logf("%d tasks in %d chords, %d chains and %d dependency pairs; %d kills", want, chords, chains, pairs, kills)
	if kills < 3 {
		t.Fatalf("only %d kills: the run was too short to test anything", kills)
	}

	type run struct {
		runs    string
		started int64
		input   []byte
	}
	got := map[string][]run{}
	for _, r := range outs {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		var rn run
		rn.input = task.Input
		for _, h := range task.Headers {
			switch h.Key {
			case handlers.RunsHeader:
				rn.runs = string(h.Value)
			case handlers.StartedHeader:
				rn.started, _ = strconv.ParseInt(string(h.Value), 10, 64)
			}
		}
		got[task.ID] = append(got[task.ID], rn)
	}
	once := func(id string) run {
		t.Helper()
		rs := got[id]
		if len(rs) != 1 || rs[0].runs != "1" {
			t.Fatalf("task %s: %d outputs %+v, want one with run counter 1", id, len(rs), rs)
		}
		return rs[0]
	}
	if len(got) != want {
		t.Fatalf("%d distinct tasks in the output, want %d", len(got), want)
	}
	result := func(input []byte) (runs int) {
		var r struct{ Runs int }
		if err := json.Unmarshal(input, &r); err != nil {
			t.Fatalf("a step's input %q is not a result: %v", input, err)
		}
		return r.Runs
	}
	for i := range chords {
		for m := range 10 {
			once(fmt.Sprintf("c%d.m%d", i, m))
		}
		cb := once(fmt.Sprintf("c%d.cb", i))
		results, err := workflow.Results(cb.input)
		if err != nil || len(results) != 10 {
			t.Fatalf("chord %d's callback got %d results (%v): %q", i, len(results), err, cb.input)
		}
		for m, r := range results {
			if result(r) != 1 {
				t.Fatalf("chord %d's callback got member %d's result %s", i, m, r)
			}
		}
	}
	for i := range chains {
		prev := once(fmt.Sprintf("ch%d.s0", i))
		for s := 1; s < 5; s++ {
			cur := once(fmt.Sprintf("ch%d.s%d", i, s))
			if cur.input == nil || result(cur.input) != 1 || cur.started < prev.started {
				t.Fatalf("chain %d: step %d started at %d with input %q; step %d started at %d", i, s, cur.started, cur.input, s-1, prev.started)
			}
			prev = cur
		}
	}
	finished := finishedTimes(t, conn)
	for i := range pairs {
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		once(a)
		rb := once(b)
		fa, ok := finished[a]
		if !ok {
			t.Fatalf("no succeeded record of %s", a)
		}
		if rb.started < fa {
			t.Fatalf("%s started at %d, before its dependency %s finished at %d", b, rb.started, a, fa)
		}
	}
}

// finishedTimes reads, from the task records of queue "in", when each task
// succeeded (unix ms).
func finishedTimes(t *testing.T, conn broker.Conn) map[string]int64 {
	out := map[string]int64{}
	for _, r := range testutil.ReadCommitted(t, conn, time.Minute, broker.RecordsTopic("in")) {
		recs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.State == onceq.StateSucceeded {
				out[rec.ID] = rec.Finished.UnixMilli()
			}
		}
	}
	return out
}
