package consumer_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestTooLargeTaskEndsInDeadLetters pins a wedged partition: a 5 MB task in
// a queue that takes it, copied to a queue that does not, failed its emit,
// and its retry (5 MB into onceq-delay-1s) aborted every commit, forever,
// so nothing behind it in the partition ever committed. Now the refused
// record turns its task into a dead letter with reason too_large (without
// the payload) and the tasks after it are committed. A real worker
// process runs it.
func TestTooLargeTaskEndsInDeadLetters(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.EnsureTopic(t.Context(), "in", 1, map[string]string{"max.message.bytes": strconv.Itoa(8 << 20)}); err != nil {
		t.Fatal(err)
	}
	testutil.CreateTopic(t, conn, "out", 1)
	cl, err := conn.NewClient(kgo.ProducerBatchMaxBytes(8 << 20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i, id := range []string{"small-0", "huge", "small-1", "small-2"} {
		payload := []byte("payload")
		if id == "huge" {
			payload = []byte(strings.Repeat("x", 5<<20))
		}
		task := onceq.Task{ID: id, Queue: "in", Key: []byte("k"), Payload: payload, MaxAttempts: 3}
		task.Resolve(time.Now())
		recs = append(recs, task.Record("in"))
		_ = i
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	w := testutil.Start(t, "worker", "--brokers", conn.Brokers[0], "--group", "big", "--queue", "in", "--handler", "copy:out",
		"--checkpoint-dir", filepath.Join(t.TempDir(), "w"), "--metrics-addr", "", "--log-level", "warn", "--commit-interval", "50ms",
		"--backoff-base", "100ms", "--max-attempts", "3")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker output:\n%s", tail(w.Output(), 4000))
		}
	})
	defer func() {
		w.Signal(syscall.SIGTERM)
		_, _ = w.Wait(30 * time.Second)
	}()
	out := waitRecords(t, conn, "out", 3, 90*time.Second)
	dead := waitRecords(t, conn, "onceq-dlq-in", 1, 60*time.Second)
	checkExactlyOnce(t, out, []string{"small-0", "small-1", "small-2"})
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d := dead[0]
	if id, errText := header(d, onceq.HeaderID), header(d, onceq.HeaderError); id != "huge" || !strings.HasPrefix(errText, "too_large: ") || len(d.Value) != 0 {
		t.Fatalf("dead letter id %q, error %q, %d payload bytes; want huge, too_large: ..., none", id, errText, len(d.Value))
	}
	if header(d, onceq.HeaderFailed) == "" {
		t.Fatal("the dead letter has no onceq-failed")
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestDueAheadOnTheQueueNeverEarly pins an early run: a record written
// straight to a queue (as any Kafka client can) with onceq-due 3 s ahead
// ran at once. It now waits for its due time: in its slot when that is
// close, through the delay buckets otherwise, and runs once.
func TestDueAheadOnTheQueueNeverEarly(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 2)
	now := time.Now()
	due := map[string]time.Time{"soon": now.Add(150 * time.Millisecond), "later": now.Add(3 * time.Second), "now": now}
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for id, at := range due {
		// Not through the producer, which would route it to the
		// buckets itself.
		r := &kgo.Record{Topic: "in", Key: []byte(id), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: onceq.HeaderID, Value: []byte(id)},
			{Key: onceq.HeaderDue, Value: []byte(strconv.FormatInt(at.UnixMilli(), 10))},
		}}
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	started := map[string][]time.Time{}
	h := consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
		mu.Lock()
		started[task.ID] = append(started[task.ID], time.Now())
		mu.Unlock()
		return nil
	})
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("due"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h))
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(started)
		mu.Unlock()
		if n == len(due) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a second run would show now
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, at := range due {
		runs := started[id]
		if len(runs) != 1 {
			t.Fatalf("%s ran %d times, want 1", id, len(runs))
		}
		// Due times are whole milliseconds on the wire.
		if early := at.Truncate(time.Millisecond).Sub(runs[0]); early > 0 {
			t.Fatalf("%s started %v before it was due", id, early)
		}
		t.Logf("%s: started %v after its due time", id, runs[0].Sub(at).Round(time.Millisecond))
	}
}

// TestForeignPartitionerDuplicatesRunOnce pins a dedup gap: librdkafka's
// default partitioner (kcat, Python, Node) puts a key in another partition
// than Kafka's default, which the onceq producer uses, so duplicates of an
// ID written by both ran once in each partition. A worker now forwards a
// record with an ID found outside its key's partition to that partition,
// exactly once, instead of running it.
func TestForeignPartitionerDuplicatesRunOnce(t *testing.T) {
	kcat := testutil.Kcat(t)
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 8)
	testutil.CreateTopic(t, conn, "out", 8)
	ids := ids(40)
	produceTasks(t, conn, "in", ids) // murmur2, through franz-go
	var lines strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&lines, "%s:payload-%s\n", id, id)
	}
	// kcat's default partitioner is consistent_random (CRC32 of the key).
	for _, id := range ids {
		cmd := exec.Command(kcat, "-b", conn.Brokers[0], "-P", "-t", "in", "-K", ":", "-H", onceq.HeaderID+"="+id)
		cmd.Stdin = strings.NewReader(id + ":payload-" + id + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, out)
		}
	}
	// Check that kcat did scatter the keys, or the test proves nothing.
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := adm.Kadm().ListEndOffsets(t.Context(), "in")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(2*len(ids)) {
		t.Fatalf("%d records in the queue, want %d", total, 2*len(ids))
	}
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("kc"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(copyCounting("out")))
	waitOutputs(t, conn, "out", len(ids), 60*time.Second)
	time.Sleep(time.Second) // a second run would land now
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	out := testutil.ReadCommitted(t, conn, 10*time.Second, "out")
	checkExactlyOnce(t, out, ids)
	for _, r := range out {
		if header(r, "runs") != "1" {
			t.Fatalf("%s: runs %q", header(r, onceq.HeaderID), header(r, "runs"))
		}
	}
}

// TestStateUnderAtLeastOnce pins two at-least-once bugs: State read a nil
// checkpoint, so every handler that used State failed and was retried
// (its State now lives in memory, per partition); and a commit interval
// under 100ms made the worker fail to start (franz-go's autocommit
// interval has that minimum; the worker commits its marks itself).
func TestStateUnderAtLeastOnce(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	produceTasks(t, conn, "in", []string{"a", "b", "c"})
	counts := make(chan int64, 3)
	h := consumer.HandlerFunc(func(_ context.Context, task *consumer.Task) error {
		n, err := task.State().Counter([]byte("seen"), 1)
		if err != nil {
			return err
		}
		counts <- n
		return nil
	})
	// One slot: the three tasks have keys of their own, and tasks of
	// different keys may run at once, so a state key they all write (as
	// "seen" here) is counted right only if they run one at a time.
	stop := runWorker(t, consumer.Conn(conn), consumer.Group("alo"), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.WithHandler(h), consumer.WithGuarantee(consumer.AtLeastOnce), consumer.CommitInterval(20*time.Millisecond),
		consumer.Concurrency(1))
	var got []int64
	for range 3 {
		select {
		case n := <-counts:
			got = append(got, n)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of 3 tasks ran: %v", len(got), got)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("counter values %v, want 1 2 3", got)
	}
}
