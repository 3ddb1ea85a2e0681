package consumer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCrashCancel: 1,000 tasks due 5 s ahead, 500 of them canceled just
// after they were submitted, run by three worker processes (each with its
// delay service), one of them SIGKILLed and restarted while the tasks
// wait: exactly the 500 others run, once each and none early, and the 500
// end canceled.
func TestCrashCancel(t *testing.T) {
	const n = 1000
	_, conn := testutil.StartBroker(t, "")
	addr := conn.Brokers[0]
	testutil.CreateTopic(t, conn, "in", 4)
	testutil.CreateTopic(t, conn, "out", 4)
	extra := []string{"--buckets", "100ms,1s,2s", "--delay-service=true"}
	slots := make([]*workerProc, 3)
	for i := range slots {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("w%d", i))
		slots[i] = &workerProc{dir: dir, proc: startWorker(t, addr, "cancel", dir, extra...)}
	}
	due := time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
	var all, run []string
	var cancels []ctltopic.Entry
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c-%d", i)
		all = append(all, id)
		if i%2 == 0 {
			cancels = append(cancels, ctltopic.Entry{Queue: "in", ID: id, At: time.Now()})
		} else {
			run = append(run, id)
		}
	}
	produceTasks(t, conn, "in", all, func(task *onceq.Task) { task.Due = due })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ctltopic.Write(ctx, conn, cancels...); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	checkRunning(t, slots)
	s := slots[1]
	s.proc.Signal(syscall.SIGKILL)
	if _, err := s.proc.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.proc = startWorker(t, addr, "cancel", s.dir, extra...)

	waitOutputs(t, conn, "out", len(run), time.Minute)
	var byID map[string][]onceq.TaskRecord
	deadline := time.Now().Add(time.Minute)
	for {
		byID = taskRecords(t, testutil.ReadCommitted(t, conn, 10*time.Second, broker.RecordsTopic("in")))
		if countFinal(byID) == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // a late rerun would show by now
	for _, s := range slots {
		s.proc.Signal(syscall.SIGTERM)
	}
	for _, s := range slots {
		if code, err := s.proc.Wait(60 * time.Second); err != nil || code != 0 {
			t.Errorf("worker exit %d (%v):\n%s", code, err, tail(s.proc.Output(), 2000))
		}
	}
	outs := testutil.ReadCommitted(t, conn, time.Minute, "out")
	checkExactlyOnce(t, outs, run)
	for _, r := range outs {
		for _, h := range r.Headers {
			if h.Key == handlers.StartedHeader {
				if ms, _ := strconv.ParseInt(string(h.Value), 10, 64); ms < due.UnixMilli() {
					t.Fatalf("%s started %d ms before its due time", r.Key, due.UnixMilli()-ms)
				}
			}
		}
	}
	canceled := 0
	for i, id := range all {
		rs := byID[id]
		if len(rs) == 0 {
			t.Fatalf("%s has no task record", id)
		}
		last := rs[len(rs)-1]
		want := onceq.StateSucceeded
		if i%2 == 0 {
			want = onceq.StateCanceled
		}
		if last.State != want {
			t.Fatalf("%s ended %s (%s), want %s", id, last.State, states(rs), want)
		}
		for _, r := range rs[:len(rs)-1] {
			if r.State.Final() {
				t.Fatalf("%s has two final records: %s", id, states(rs))
			}
		}
		if last.State == onceq.StateCanceled {
			canceled++
		}
	}
	if canceled != n/2 {
		t.Fatalf("%d canceled, want %d", canceled, n/2)
	}
}
