package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCrashSlowTail is TestCrashCopyExactlyOnce with a slow tail: 2% of
// the tasks sleep 1-2 s in the count: handler (its "sleep" header), so a
// worker's commits keep finding tasks still running below records that
// finished, and each kill lands on some. Records finished above a slow one
// are committed with the ranges of finished offsets (and, for the half
// whose IDs a client chose, their processed-ID marks), never their
// offsets: the partition's next owner must acknowledge them without
// running them and run each slow one once.
func TestCrashSlowTail(t *testing.T) {
	n := 20_000
	if testing.Short() {
		n = 5_000
	}
	rng := seededRand(t)
	all := ids(n)
	tasks := make([]onceq.Task, len(all))
	slow := 0
	for i, id := range all {
		// Half the IDs are generated: they leave no processed-ID mark, and
		// the offsets finished above a slow one are all that covers them.
		tasks[i] = onceq.Task{ID: id, GeneratedID: i%2 == 0, Payload: []byte("payload-" + id)}
		if rng.Float64() < 0.02 {
			d := time.Second + time.Duration(rng.IntN(1000))*time.Millisecond
			tasks[i].Headers = []onceq.Header{{Key: "sleep", Value: []byte(d.String())}}
			slow++
		}
	}
	t.Logf("%d of %d tasks sleep 1-2 s", slow, n)
	crashRun(t, rng, tasks, all, "--concurrency", "64")
}

// TestSlowTailPartitionMovesToEmptyCheckpoint: a worker runs a queue of 4
// partitions with slow tasks (2 s; a new one per partition every 500 ms,
// among fast ones) in flight, and a second worker with an empty checkpoint
// dir joins its group, so that partitions move while slow tasks of them
// run. The first worker's runs of the moved partitions are dropped, and so
// are their results: half of its slow handlers return when their context is
// canceled, the other half finish and emit anyway. The new owner restores
// the partitions from their changelog, acknowledges the tasks that finished
// above a slow one without running them (the fast ones, whose IDs are
// generated, by the ranges of finished offsets alone), and runs the
// unfinished ones.
// Every ID must come out once, having run once.
func TestSlowTailPartitionMovesToEmptyCheckpoint(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 4)
	testutil.CreateTopic(t, conn, "out", 4)

	// Each wave holds a slow task per partition and 100 fast ones.
	const waves, fastPerWave = 60, 100
	home := kgo.StickyKeyPartitioner(nil).ForTopic("in")
	var waveIDs [waves][]string
	stubborn := map[string]bool{} // slow tasks whose handler ignores its canceled context
	fast := ids(waves * fastPerWave)
	for w := range waves {
		for p, k := 0, 0; p < 4; k++ {
			id := fmt.Sprintf("slow-%d-%d", w, k)
			if home.Partition(&kgo.Record{Key: []byte(id)}, 4) != p {
				continue
			}
			waveIDs[w] = append(waveIDs[w], id)
			stubborn[id] = (w+p)%2 == 1
			p++
		}
		waveIDs[w] = append(waveIDs[w], fast[w*fastPerWave:(w+1)*fastPerWave]...)
	}

	var mu sync.Mutex
	startedOn := map[string][]string{} // slow ID -> the workers that started it, in order
	var secondRan atomic.Int64
	handler := func(worker string) consumer.Handler {
		next := copyCountingAs("out", worker)
		return consumer.HandlerFunc(func(ctx context.Context, task *consumer.Task) error {
			if worker == "B" {
				secondRan.Add(1)
			}
			if _, slow := stubborn[task.ID]; slow {
				mu.Lock()
				startedOn[task.ID] = append(startedOn[task.ID], worker)
				mu.Unlock()
				timer := time.NewTimer(2 * time.Second)
				defer timer.Stop()
				select {
				case <-timer.C:
				case <-ctx.Done():
					if !stubborn[task.ID] {
						return ctx.Err()
					}
					<-timer.C
				}
			}
			return next.Handle(ctx, task)
		})
	}
	opts := func(worker string) []consumer.Opt {
		return []consumer.Opt{consumer.Conn(conn), consumer.Group("moves"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
			consumer.WithHandler(handler(worker)), consumer.Concurrency(64), consumer.CommitInterval(50 * time.Millisecond),
			consumer.SessionTimeout(6 * time.Second), consumer.TransactionTimeout(5 * time.Second), consumer.Logger(testLogger(t))}
	}
	stopA := runWorker(t, opts("A")...)
	var stopB func() error
	var want []string
	joined := -1
	for w := 0; ; w++ {
		if w == waves {
			t.Fatalf("%d waves (%v) and the second worker has not run tasks for 4 waves (first in wave %d)",
				waves, time.Duration(waves)*500*time.Millisecond, joined)
		}
		// The fast tasks' IDs are generated: the ranges of finished
		// offsets alone cover those that finish above a slow one.
		produceTasks(t, conn, "in", waveIDs[w], func(task *onceq.Task) { task.GeneratedID = !strings.HasPrefix(task.ID, "slow-") })
		want = append(want, waveIDs[w]...)
		switch {
		case w == 4: // the first worker's slots hold slow tasks now
			stopB = runWorker(t, opts("B")...)
		case joined < 0 && secondRan.Load() > 0:
			joined = w
			t.Logf("the second worker ran its first task in wave %d, %v after it started", w, time.Duration(w-4)*500*time.Millisecond)
		}
		if joined >= 0 && w >= joined+4 { // slow tasks after the move, on both workers
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	waitOutputs(t, conn, "out", len(want), time.Minute)
	time.Sleep(time.Second) // a duplicate would land after the originals
	for _, stop := range []func() error{stopA, stopB} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	outs := testutil.ReadCommitted(t, conn, 30*time.Second, "out")
	checkExactlyOnce(t, outs, want)
	checkRunCounters(t, conn, broker.ChangelogTopic("moves", "in"), want)
	if dls, _ := testutil.ReadCommittedErr(conn, 10*time.Second, broker.DLQTopic("in")); len(dls) != 0 {
		t.Fatalf("%d dead letters: a dropped run of a moved partition counted as a failure", len(dls))
	}

	// The slow tasks the first worker started and the second one ran to
	// the output moved while they ran (or finished uncommitted).
	moved, movedStubborn, slowByB := 0, 0, 0
	mu.Lock()
	defer mu.Unlock()
	for _, r := range outs {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		byB := slices.ContainsFunc(task.Headers, func(h onceq.Header) bool { return h.Key == "worker" && string(h.Value) == "B" })
		if _, slow := stubborn[task.ID]; !slow || !byB {
			continue
		}
		slowByB++
		if slices.Contains(startedOn[task.ID], "A") {
			moved++
			if stubborn[task.ID] {
				movedStubborn++
			}
		}
	}
	t.Logf("%d tasks (%d slow) in %d waves; the second worker ran %d slow ones to the output, %d of them moved from the first "+
		"while it ran them (%d ignoring their canceled context)", len(want), len(want)/(4+fastPerWave)*4, len(want)/(4+fastPerWave),
		slowByB, moved, movedStubborn)
	if moved == 0 || movedStubborn == 0 || moved == movedStubborn {
		t.Fatalf("%d slow tasks moved while running, %d of them ignoring their canceled context: want both kinds", moved, movedStubborn)
	}
}
