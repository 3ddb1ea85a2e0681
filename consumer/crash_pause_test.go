package consumer_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCrashPausedWorker freezes a worker process (SIGSTOP) for longer
// than its session and transaction timeouts, in the middle of the work,
// then lets it go on (SIGCONT), up to three times: the group has given its
// partitions to the others and the coordinator has aborted its open
// transaction, so the zombie's commits must all be fenced. A fresh
// read_committed reader must see every ID once, and every per-ID run
// counter must be 1; on one node and on three whose leaders and
// coordinators move every second.
//
// The workers run KIP-848 groups (--group-protocol consumer), where the
// others go on while one is frozen. In a classic group every member waits
// at each rebalance's join for the frozen one, and the embedded broker
// restarts that wait at every join it receives, so members that time out
// and rejoin can keep a classic group from ever completing the rebalance
// (seen here: no progress for minutes); Kafka ends the wait at the
// rebalance timeout.
func TestCrashPausedWorker(t *testing.T) {
	for _, tc := range []struct {
		name       string
		brokerArgs []string
	}{{"one-node", []string{}}, {"three-nodes-moving-leaders", []string{"--nodes", "3", "--move-leaders-every", "1s"}}} {
		t.Run(tc.name, func(t *testing.T) {
			pauseRun(t, tc.brokerArgs, 5000, "--group-protocol", "consumer")
		})
	}
}

// pauseRun's bounds: how long the outputs may stop growing, and how long
// the run may take in all.
const (
	pauseStall  = 45 * time.Second
	pauseRunMax = 5 * time.Minute
)

func pauseRun(t *testing.T, brokerArgs []string, n int, extra ...string) {
	rng := seededRand(t)
	var addr string
	if len(brokerArgs) == 0 { // one node: the test's broker, Apache Kafka too
		_, conn := testutil.StartBroker(t, "")
		addr = conn.Brokers[0]
	} else {
		_, addr = testutil.StartBrokerProcess(t, "127.0.0.1:0", "", brokerArgs...)
	}
	want := ids(n)
	const group = "pause"
	conn, slots := startThreeWorkers(t, addr, group, extra...)
	go func() {
		wave := max(n/100, 1)
		for i := 0; i < n; i += wave {
			produceTasksQuiet(conn, "in", want[i:min(i+wave, n)])
			time.Sleep(200 * time.Millisecond)
		}
	}()
	pauses := 0
	// The run fails when the outputs stop growing for pauseStall (a
	// pause lasts at most 12 s, and its partitions move after the 6 s
	// session), or after pauseRunMax in all: a loaded machine is slow,
	// not stuck.
	start, last, lastAt := time.Now(), -1, time.Now()
	for {
		got := countRecords(t, conn, "out")
		if got >= n && len(testutil.ReadCommitted(t, conn, time.Minute, "out")) >= n {
			break
		}
		if got > last {
			last, lastAt = got, time.Now()
		}
		if stalled, long := time.Since(lastAt) > pauseStall, time.Since(start) > pauseRunMax; stalled || long {
			for i, s := range slots {
				t.Logf("worker %d:\n%s", i, tail(s.proc.Output(), 4000))
			}
			t.Fatalf("%d of %d outputs after %v (%d pauses); none new for %v", got, n, time.Since(start).Round(time.Second), pauses, time.Since(lastAt).Round(time.Second))
		}
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		if pauses < 3 {
			s := slots[rng.IntN(len(slots))]
			s.proc.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(7000+rng.IntN(5000)) * time.Millisecond) // past the 6 s session and 5 s transaction timeouts
			s.proc.Signal(syscall.SIGCONT)
			pauses++
		}
	}
	time.Sleep(2 * time.Second) // a zombie's commit would land after the originals
	for _, s := range slots {
		s.proc.Signal(syscall.SIGTERM)
	}
	for _, s := range slots {
		_, _ = s.proc.Wait(60 * time.Second)
	}
	t.Logf("%d tasks, %d pauses", n, pauses)
	if pauses < 2 {
		t.Fatalf("only %d pauses: the run was too short to test frozen workers", pauses)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, time.Minute, "out"), want)
	checkRunCounters(t, conn, broker.ChangelogTopic(group, "in"), want)
}
