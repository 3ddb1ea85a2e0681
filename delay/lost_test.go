package delay

import (
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
)

// TestLostKeepsANewAssignment: a commit that finds a partition no longer
// assigned (broker.NotAssignedError) releases the part it moved records
// of, and not a part the service made since for the same partition,
// assigned to it again while the commit ran (its revocation unheard: kgo's
// transact session passes on one revocation between two commits).
// Released, the new part would never be read from, and the partition's
// delayed records would wait until the next rebalance.
func TestLostKeepsANewAssignment(t *testing.T) {
	s, err := NewService(Conn(broker.Conn{Brokers: []string{"127.0.0.1:9"}}), StateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	k := tp{"onceq-delay-1s", 2}
	gone := map[string][]int32{k.topic: {k.partition}}
	moved, again := newPart(s.cfg.planner, k.topic, k.partition, time.Second), newPart(s.cfg.planner, k.topic, k.partition, time.Second)
	s.parts[k] = again

	s.lost(gone, []*move{{p: moved}})
	if s.parts[k] != again || again.revoked.Load() {
		t.Fatalf("a commit of an earlier assignment released the partition's new part: parts %v, revoked %v", s.parts, again.revoked.Load())
	}
	s.lost(gone, []*move{{p: again}})
	if s.parts[k] != nil || !again.revoked.Load() {
		t.Fatalf("a commit of the partition's current part kept it: parts %v, revoked %v", s.parts, again.revoked.Load())
	}
}
