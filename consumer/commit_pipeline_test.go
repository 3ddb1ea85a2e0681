package consumer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// TestCommitBesideCheckpointWrite: while a commit's checkpoint write
// waits for its disk (its log's sync held), the worker goes on fetching,
// running and committing: the next task's output commits, rather than the
// worker's loop waiting for the held write. Once the disk goes on, every
// task's output is there once.
func TestCommitBesideCheckpointWrite(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 1)
	testutil.CreateTopic(t, conn, "out", 1)
	var hold atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(o errorfs.Op) error {
		sync := o.Kind == errorfs.OpFileSync || o.Kind == errorfs.OpFileSyncData || o.Kind == errorfs.OpFileSyncTo
		if sync && hold.Load() && strings.HasSuffix(o.Path, ".log") {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	}))
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	w, err := consumer.New(consumer.Conn(conn), consumer.Queues("in"), consumer.CheckpointDir(t.TempDir()),
		consumer.CheckpointFS(fs), consumer.CommitInterval(20*time.Millisecond), consumer.WithHandler(copyCounting("out")))
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w)
	produceTasks(t, conn, "in", []string{"a"})
	waitOutputs(t, conn, "out", 1, time.Minute)

	hold.Store(true)
	produceTasks(t, conn, "in", []string{"b"})
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("b's checkpoint write did not sync within a minute")
	}
	produceTasks(t, conn, "in", []string{"c"})
	if recs := waitOutputs(t, conn, "out", 3, 30*time.Second); len(recs) < 3 {
		t.Fatalf("%d outputs while b's checkpoint write is held, want 3 (a, b, c): the worker waits for the write", len(recs))
	}
	hold.Store(false)
	close(release)
	released = true
	produceTasks(t, conn, "in", []string{"a", "b", "c", "d"}) // duplicates, and a task after the held write
	// Every input record settled: a duplicate that ran has its output in.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := bench.WaitCommitted(ctx, conn, consumer.DefaultGroup, 7); err != nil {
		t.Fatalf("the group did not commit the 7 input records: %v", err)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 30*time.Second, "out"), []string{"a", "b", "c", "d"})
}
