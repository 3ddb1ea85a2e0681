package broker

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Assignment is what a group member was given at its last sync, as its
// balancer read it from the SyncGroup response.
//
// A member of a kgo.GroupTransactSession cannot rely on its revoke
// callbacks alone: the session passes the first revocation (or loss)
// between two ends of a transaction to the user's callback, and drops the
// next ones until End clears its flag (its OnPartitionsRevoked and
// OnPartitionsLost wrappers return early while it is set). A member whose
// commit is held up while two rebalances each take a partition from it
// hears of the first one only, and would go on with the second partition
// in a generation whose fence lets its commits through: its tasks run
// again on the new owner, and both commit. Every sync gives the member its
// whole assignment, so comparing with the partitions it works on finds
// what it was not told of.
//
// A Member notes its syncs in one (MemberConfig.Assignment), and its
// Commit aborts a transaction with a partition the last sync took away.
// With ConsumerGroup (KIP-848) no sync tells: Has reports every partition.
// The zero value is ready to use.
type Assignment struct {
	mu    sync.Mutex
	known bool
	parts map[string]map[int32]bool
}

// track returns b, noting in a every assignment b reads from a SyncGroup
// response: the balancer of one client (Member). The zero Assignment is
// ready for it.
func (a *Assignment) track(b kgo.GroupBalancer) kgo.GroupBalancer {
	return trackingBalancer{b, a}
}

type trackingBalancer struct {
	kgo.GroupBalancer
	a *Assignment
}

func (t trackingBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	m, err := t.GroupBalancer.ParseSyncAssignment(assignment)
	if err == nil {
		t.a.set(m)
	}
	return m, err
}

func (a *Assignment) set(m map[string][]int32) {
	parts := make(map[string]map[int32]bool, len(m))
	for topic, ps := range m {
		parts[topic] = make(map[int32]bool, len(ps))
		for _, p := range ps {
			parts[topic][p] = true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known, a.parts = true, parts
}

// Has reports whether the last sync assigned topic's partition p, and true
// before the first sync (nothing is known yet: the member owns nothing
// then, as far as its callbacks go).
func (a *Assignment) Has(topic string, p int32) bool {
	if a == nil {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.known || a.parts[topic][p]
}
