package workflow_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/workflow"
)

// timeline records, for every task the benchmark's worker runs, when its
// handler started and ended, and when each of the worker's commits
// collected its results and committed them to Kafka.
type timeline struct {
	mu      sync.Mutex
	started map[string]time.Time
	ended   map[string]time.Time
	inputs  map[string][]byte
	runs    map[string]int
	commits []commitTimes
	pending time.Time // the collection time of the commit under way
}

type commitTimes struct{ collected, committed time.Time }

func newTimeline() *timeline {
	return &timeline{started: map[string]time.Time{}, ended: map[string]time.Time{}, inputs: map[string][]byte{}, runs: map[string]int{}}
}

func (tl *timeline) handler() consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		now := time.Now()
		tl.mu.Lock()
		tl.started[t.ID], tl.inputs[t.ID] = now, t.Input
		tl.runs[t.ID]++
		tl.mu.Unlock()
		if err := t.SetResult([]byte(`{"id":"` + t.ID + `"}`)); err != nil {
			return err
		}
		tl.mu.Lock()
		tl.ended[t.ID] = time.Now()
		tl.mu.Unlock()
		return nil
	})
}

func (tl *timeline) hook(p consumer.CommitPoint) {
	now := time.Now()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	switch p {
	case consumer.BeforeKafkaCommit:
		tl.pending = now
	case consumer.BetweenCommits:
		tl.commits = append(tl.commits, commitTimes{tl.pending, now})
	}
}

// committed is when the task's result was committed: by the first
// commit that collected results after its handler ended. A result
// collected a moment before the hook saw the commit begin is counted in
// the commit before its own, which makes the figures larger, never
// smaller.
func (tl *timeline) committed(id string) time.Time {
	end := tl.ended[id]
	i := sort.Search(len(tl.commits), func(i int) bool { return tl.commits[i].collected.After(end) })
	if i == len(tl.commits) {
		return time.Time{}
	}
	return tl.commits[i].committed
}

func (tl *timeline) wait(b *testing.B, ids []string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		tl.mu.Lock()
		missing := ""
		for _, id := range ids {
			if _, ok := tl.ended[id]; !ok {
				missing = id
				break
			}
		}
		tl.mu.Unlock()
		if missing == "" {
			time.Sleep(100 * time.Millisecond) // the last commits land
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("task %s did not run within %v", missing, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// benchEnv runs the env of the tests, with a worker of "steps" (8
// partitions) running the timeline's handler and committing every commit
// (a step's next one is emitted by its commit, so it bounds the time from
// a step's end to its commit), and returns its producer.
func benchEnv(b *testing.B, tl *timeline, commit time.Duration) *producer.Producer {
	return startEnv(b, tl.handler(), 8, []string{"steps"}, consumer.CommitInterval(commit), consumer.CommitHook(tl.hook),
		consumer.Concurrency(256), consumer.TaskRecords(false)).p
}

func submitAll(b *testing.B, p *producer.Producer, starts []onceq.Task, perSecond int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	errs := make(chan error, len(starts))
	for i, s := range starts {
		if perSecond > 0 {
			time.Sleep(time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(perSecond))))
		}
		p.SubmitAsync(ctx, s, func(_ producer.Receipt, err error) { errs <- err })
	}
	for range starts {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

func percentiles(b *testing.B, name string, ds []time.Duration) {
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	b.ReportMetric(float64(at(0.5))/1e6, name+"-p50-ms")
	b.ReportMetric(float64(at(0.99))/1e6, name+"-p99-ms")
	b.ReportMetric(float64(ds[len(ds)-1])/1e6, name+"-max-ms")
	b.Logf("%s over %d: p50 %v, p99 %v, max %v", name, len(ds), at(0.5), at(0.99), ds[len(ds)-1])
}

// BenchmarkChords: chords of members each, submitted at once. Reported:
// the time from the commit of each chord's last member to its callback's
// start, with the worker committing every 10ms (the target: p99 at most 200 ms for 100 chords of 100).
// Every callback must run once with all its members' results. Run with
// -benchtime 1x.
func BenchmarkChords(b *testing.B) {
	for _, c := range []struct{ chords, members int }{{100, 100}, {1, 10_000}} {
		b.Run(fmt.Sprintf("%dx%d", c.chords, c.members), func(b *testing.B) {
			for range b.N {
				benchChords(b, c.chords, c.members)
			}
		})
	}
}

func benchChords(b *testing.B, chords, members int) {
	tl := newTimeline()
	p := benchEnv(b, tl, 10*time.Millisecond)
	var starts []onceq.Task
	var callbacks []string
	for i := range chords {
		group := make([]workflow.Node, members)
		for m := range group {
			group[m] = workflow.Task(onceq.Task{Queue: "steps"})
		}
		id := fmt.Sprintf("chord-%d", i)
		start, err := workflow.Prepare(id, workflow.Chord(workflow.Group(group...), workflow.Task(onceq.Task{Queue: "steps"})), 0)
		if err != nil {
			b.Fatal(err)
		}
		starts, callbacks = append(starts, start), append(callbacks, id+"/cb")
	}
	began := time.Now()
	submitAll(b, p, starts, 0)
	tl.wait(b, callbacks, 5*time.Minute)
	b.ReportMetric(float64(chords*members)/time.Since(began).Seconds(), "members/s")
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var lat []time.Duration
	for i := range chords {
		id := fmt.Sprintf("chord-%d", i)
		var last time.Time
		for m := range members {
			mid := fmt.Sprintf("%s/%d", id, m)
			if tl.runs[mid] != 1 {
				b.Fatalf("member %s ran %d times", mid, tl.runs[mid])
			}
			if c := tl.committed(mid); c.After(last) {
				last = c
			}
		}
		cb := id + "/cb"
		results, err := workflow.Results(tl.inputs[cb])
		if tl.runs[cb] != 1 || err != nil || len(results) != members {
			b.Fatalf("callback %s ran %d times with %d results (%v)", cb, tl.runs[cb], len(results), err)
		}
		for m, r := range results {
			if want := fmt.Sprintf(`{"id":"%s/%d"}`, id, m); string(r) != want {
				b.Fatalf("callback %s: result %d is %s, want %s", cb, m, r, want)
			}
		}
		lat = append(lat, tl.started[cb].Sub(last))
	}
	percentiles(b, "last-commit-to-callback", lat)
}

// BenchmarkChainSteps: chains of 5 steps submitted at 1,000 a second for
// 5 s, with the worker committing every 10ms and every 100ms (its
// default). Reported: from each step's commit, and from its handler's
// end, to the next step's start (the target: p99 at most 50 ms).
func BenchmarkChainSteps(b *testing.B) {
	for _, commit := range []time.Duration{10 * time.Millisecond, consumer.DefaultCommitInterval} {
		b.Run("commit="+commit.String(), func(b *testing.B) {
			for range b.N {
				benchChainSteps(b, commit)
			}
		})
	}
}

func benchChainSteps(b *testing.B, commit time.Duration) {
	const chains, steps, rate = 5000, 5, 1000
	tl := newTimeline()
	p := benchEnv(b, tl, commit)
	starts := make([]onceq.Task, chains)
	var last []string
	for i := range starts {
		ns := make([]workflow.Node, steps)
		for s := range ns {
			ns[s] = workflow.Task(onceq.Task{Queue: "steps"})
		}
		id := fmt.Sprintf("chain-%d", i)
		var err error
		if starts[i], err = workflow.Prepare(id, workflow.Chain(ns...), 0); err != nil {
			b.Fatal(err)
		}
		last = append(last, fmt.Sprintf("%s/%d", id, steps-1))
	}
	submitAll(b, p, starts, rate)
	tl.wait(b, last, 5*time.Minute)
	tl.mu.Lock()
	var fromCommit, fromEnd []time.Duration
	for i := range chains {
		for s := 1; s < steps; s++ {
			prev, cur := fmt.Sprintf("chain-%d/%d", i, s-1), fmt.Sprintf("chain-%d/%d", i, s)
			if tl.runs[cur] != 1 || string(tl.inputs[cur]) != `{"id":"`+prev+`"}` {
				b.Fatalf("step %s ran %d times with input %q", cur, tl.runs[cur], tl.inputs[cur])
			}
			fromCommit = append(fromCommit, tl.started[cur].Sub(tl.committed(prev)))
			fromEnd = append(fromEnd, tl.started[cur].Sub(tl.ended[prev]))
		}
	}
	tl.mu.Unlock()
	percentiles(b, "commit-to-next-step", fromCommit)
	percentiles(b, "end-to-next-step", fromEnd)
}
