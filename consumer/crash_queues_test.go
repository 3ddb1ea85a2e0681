package consumer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCrashManyQueues: three "onceq worker" processes of one group run
// 1,000 one-partition queues, named by a pattern, while one of them,
// chosen at random, is SIGKILLed and restarted every 1-3 s. Tasks come
// through onceq's producer (with wake-ups) to most queues and as plain
// records (without) to every tenth, spread over about 15 s, so that the
// workers restore partitions, take over others' and wake quiet ones all
// along. A fresh read_committed reader must then see every task's output
// exactly once. With -short, 200 queues.
func TestCrashManyQueues(t *testing.T) {
	crashManyQueues(t, false)
}

// TestCrashManyLaneQueues is TestCrashManyQueues with 1,000 lane queues
// (mq/q-0000 to mq/q-0999) on one lane of 8 partitions.
func TestCrashManyLaneQueues(t *testing.T) {
	crashManyQueues(t, true)
}

func crashManyQueues(t *testing.T, lanes bool) {
	queues, perQueue := 1000, 10
	if testing.Short() {
		queues = 200
	}
	rng := seededRand(t)
	_, conn := testutil.StartBroker(t, "")
	addr := conn.Brokers[0]
	names := make([]string, queues)
	format, pattern := "mq-%04d", `mq-[0-9]+`
	if lanes {
		format, pattern = "mq/q-%04d", `mq/q-[0-9]+`
	}
	for i := range names {
		names[i] = fmt.Sprintf(format, i)
	}
	if lanes {
		testutil.CreateTopic(t, conn, "mq", 8)
	} else {
		cl, err := conn.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, -1, nil, names...); err != nil {
			t.Fatal(err)
		}
		cl.Close()
	}
	testutil.CreateTopic(t, conn, "out", 8)

	var want []string
	var tasks []onceq.Task
	for i := range perQueue {
		for _, q := range names {
			id := fmt.Sprintf("%s/%d", q, i)
			want = append(want, id)
			tasks = append(tasks, onceq.Task{ID: id, Queue: q, Payload: []byte(id)})
		}
	}
	rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })

	const group = "crash-queues"
	start := func(dir string) *testutil.Process {
		return testutil.Start(t, "worker", "--brokers", addr, "--group", group, "--queue", pattern, "--handler", "count:out",
			"--checkpoint-dir", dir, "--metrics-addr", "", "--session-timeout", "6s", "--transaction-timeout", "5s",
			"--commit-interval", "50ms", "--log-level", "warn", "--delay-service=false", "--workflow-service=false",
			"--scheduler=false", "--metrics-per-queue=false")
	}
	slots := make([]*workerProc, 3)
	for i := range slots {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", i))
		slots[i] = &workerProc{dir: dir, proc: start(dir)}
	}
	p := newProducer(t, conn)
	go func() {
		wave := max(len(tasks)/100, 1)
		for i := 0; i < len(tasks); i += wave {
			var plain []onceq.Task
			for _, task := range tasks[i:min(i+wave, len(tasks))] {
				if task.Queue[len(task.Queue)-1] == '0' {
					plain = append(plain, task)
					continue
				}
				p.SubmitAsync(context.Background(), task, nil)
			}
			for _, task := range plain {
				produceQuiet(conn, task.Queue, []onceq.Task{task})
			}
			time.Sleep(150 * time.Millisecond)
		}
	}()

	kills := killUntil(t, rng, conn, slots, len(want), 8*time.Minute, start)
	t.Logf("%d queues, %d tasks, %d kills", queues, len(want), kills)
	if kills < 3 {
		t.Fatalf("only %d kills: the run was too short to test crashes", kills)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "out"), want)
}
