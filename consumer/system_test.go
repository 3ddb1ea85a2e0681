package consumer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// The port of Kafka's transactions system test (tests/kafkatest/tests/core/
// transactions_test.py): seed tasks, copy them through a group of worker
// processes while bouncing the workers or the broker, and check with a
// concurrent and a final read_committed reader that the output equals the
// input, without duplicates and in order per key.

const systemKeys = 500

// systemWorkerFlags keep commits small, so that bounces land in the middle
// of the work rather than between two huge commits.
var systemWorkerFlags = []string{"--max-buffered", "2000", "--commit-interval", "20ms"}

// seedSystem writes n tasks: ID s-<i>, key k-<i mod 500>, payload the
// task's sequence number within its key.
func seedSystem(t *testing.T, conn broker.Conn, n int) []string {
	t.Helper()
	cl, err := conn.NewClient(kgo.ProducerLinger(5 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	all := make([]string, n)
	ctx := context.Background()
	for i := range all {
		all[i] = "s-" + strconv.Itoa(i)
		task := onceq.Task{ID: all[i], Queue: "in", Key: []byte("k-" + strconv.Itoa(i%systemKeys)), Payload: []byte(strconv.Itoa(i / systemKeys))}
		task.Resolve(time.Now())
		cl.Produce(ctx, task.Record("in"), nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return all
}

// orderReader consumes the output read_committed while the test runs, and
// counts duplicates and per-key order violations as they appear.
type orderReader struct {
	mu        sync.Mutex
	seen      map[string]bool
	lastSeq   map[string]int
	dups      int
	reordered int
	cancel    context.CancelFunc
	done      chan struct{}
}

func startOrderReader(t *testing.T, addr string) *orderReader {
	ctx, cancel := context.WithCancel(context.Background())
	r := &orderReader{seen: map[string]bool{}, lastSeq: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	cl, err := broker.Conn{Brokers: []string{addr}}.NewClient(kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		defer cl.Close()
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
				task, err := onceq.FromRecord(rec)
				if err != nil {
					return
				}
				seq, _ := strconv.Atoi(string(task.Payload))
				r.mu.Lock()
				if r.seen[task.ID] {
					r.dups++
				}
				r.seen[task.ID] = true
				key := string(rec.Key)
				if last, ok := r.lastSeq[key]; ok && seq <= last {
					r.reordered++
				}
				r.lastSeq[key] = seq
				r.mu.Unlock()
			})
		}
	}()
	return r
}

func (r *orderReader) progress() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *orderReader) stop() (dups, reordered int) {
	r.cancel()
	<-r.done
	return r.dups, r.reordered
}

// systemRun is one run of the system test: a broker process, three worker
// processes and the readers.
type systemRun struct {
	t       *testing.T
	addr    string
	dataDir string
	broker  *testutil.Process
	slots   []*workerProc
}

func newSystemRun(t *testing.T) *systemRun {
	s := &systemRun{t: t, dataDir: filepath.Join(t.TempDir(), "broker")}
	s.broker, s.addr = testutil.StartBrokerProcess(t, "", s.dataDir)
	conn := broker.Conn{Brokers: []string{s.addr}}
	testutil.CreateTopic(t, conn, "in", 8)
	testutil.CreateTopic(t, conn, "out", 8)
	return s
}

func (s *systemRun) startWorkers() {
	for i := 0; i < 3; i++ {
		dir := filepath.Join(s.t.TempDir(), fmt.Sprintf("w%d", i))
		s.slots = append(s.slots, &workerProc{dir: dir, proc: startWorker(s.t, s.addr, "system", dir, systemWorkerFlags...)})
	}
}

func (s *systemRun) bounceWorker(i int, sig syscall.Signal) {
	w := s.slots[i]
	w.proc.Signal(sig)
	if code, err := w.proc.Wait(60 * time.Second); err != nil || (sig == syscall.SIGTERM && code != 0) {
		s.t.Fatalf("worker %d after %v: exit %d, %v\n%s", i, sig, code, err, tail(w.proc.Output(), 2000))
	}
	w.proc = startWorker(s.t, s.addr, "system", w.dir, systemWorkerFlags...)
}

func (s *systemRun) bounceBroker(sig syscall.Signal) {
	s.broker.Signal(sig)
	if code, err := s.broker.Wait(60 * time.Second); err != nil || (sig == syscall.SIGTERM && code != 0) {
		s.t.Fatalf("broker after %v: exit %d, %v\n%s", sig, code, err, tail(s.broker.Output(), 2000))
	}
	s.broker, _ = testutil.StartBrokerProcess(s.t, s.addr, s.dataDir)
}

// finish waits for every output, stops the workers cleanly and checks the
// final read_committed view.
func (s *systemRun) finish(reader *orderReader, all []string) {
	t := s.t
	deadline := time.Now().Add(5 * time.Minute)
	for reader.progress() < len(all) && time.Now().Before(deadline) {
		checkRunning(t, s.slots)
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second)
	for _, w := range s.slots {
		w.proc.Signal(syscall.SIGTERM)
	}
	for _, w := range s.slots {
		if code, err := w.proc.Wait(60 * time.Second); err != nil || code != 0 {
			t.Errorf("worker exit %d (%v):\n%s", code, err, tail(w.proc.Output(), 2000))
		}
	}
	dups, reordered := reader.stop()
	if dups != 0 || reordered != 0 {
		t.Fatalf("the concurrent reader saw %d duplicates and %d out-of-order records", dups, reordered)
	}
	recs := testutil.ReadCommitted(t, broker.Conn{Brokers: []string{s.addr}}, time.Minute, "out")
	checkExactlyOnce(t, recs, all)
	last := map[string]int{}
	for _, r := range recs {
		seq, _ := strconv.Atoi(string(r.Value))
		if l, ok := last[string(r.Key)]; ok && seq <= l {
			t.Fatalf("key %s: sequence %d after %d", r.Key, seq, l)
		}
		last[string(r.Key)] = seq
	}
}

// TestSystemBounceWorkers bounces the workers each time another 20% of the
// tasks is out: three rounds, each one worker SIGKILLed and another
// SIGTERMed, both restarted.
func TestSystemBounceWorkers(t *testing.T) {
	n := crashTasks()
	s := newSystemRun(t)
	all := seedSystem(t, broker.Conn{Brokers: []string{s.addr}}, n)
	reader := startOrderReader(t, s.addr)
	s.startWorkers()
	for round := 1; round <= 3; round++ {
		for reader.progress() < n*round/5 {
			checkRunning(t, s.slots)
			time.Sleep(20 * time.Millisecond)
		}
		s.bounceWorker(round%3, syscall.SIGKILL)
		s.bounceWorker((round+1)%3, syscall.SIGTERM)
		t.Logf("round %d at %d outputs: bounced worker %d hard and worker %d clean", round, reader.progress(), round%3, (round+1)%3)
	}
	s.finish(reader, all)
}

// TestSystemBounceBroker bounces the broker process, with its data dir,
// at 30% and 60% of the tasks: hard (SIGKILL) the first time, clean
// (SIGTERM) the second.
func TestSystemBounceBroker(t *testing.T) {
	n := crashTasks()
	s := newSystemRun(t)
	all := seedSystem(t, broker.Conn{Brokers: []string{s.addr}}, n)
	s.startWorkers()
	reader := startOrderReader(t, s.addr)
	for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		for reader.progress() < n*(3+3*i)/10 {
			checkRunning(t, s.slots)
			time.Sleep(20 * time.Millisecond)
		}
		s.bounceBroker(sig)
		t.Logf("bounced the broker with %v at %d outputs", sig, reader.progress())
	}
	s.finish(reader, all)
}
