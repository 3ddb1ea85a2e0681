package embedded

import (
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The embedded broker keeps two files open for each partition it writes to
// a data dir (the active segment and its index), and each connection takes
// one more. Past the process's limit (ulimit -n), a topic per queue ran it
// out near 750 queues: every write failed with UNKNOWN_SERVER_ERROR and it
// accepted no more connections, its existing topics included. So with a
// data dir, a request that makes topics or partitions is refused whole
// (POLICY_VIOLATION, naming the limit and what to do) when the files its
// partitions may open would leave less than fdReserve of the limit for
// connections; what exists goes on working. Topics a client makes by
// producing or asking metadata of them (auto-creation, which onceq never
// asks for) are not counted.

// fdsPerPartition is how many files the broker keeps open for a partition
// it has written to its data dir.
const fdsPerPartition = 2

// fdReserve is what a request that makes partitions must leave of the
// process's file limit, for connections and the rest: a tenth, and at
// least 256.
func fdReserve(limit int64) int64 { return max(256, limit/10) }

// fdBudget checks new partitions against the process's open files
// (processFiles; where they cannot be known, nothing is refused). Reading
// /proc/self/fd takes 9 ms at 10,000 files, in the broker's request loop,
// so a count is reused for fdRecount, raised by what it let through, while
// that is clearly under the limit.
type fdBudget struct {
	defaultPartitions int32 // of a topic made with NumPartitions -1

	mu          sync.Mutex
	open, limit int64     // the last count, raised by what it let through
	ok          bool      // the count could be read
	counted     time.Time // when
}

// fdRecount is how long a count of the open files is reused.
const fdRecount = time.Second

// partitionsOf returns how many partitions t makes.
func (b *fdBudget) partitionsOf(t kmsg.CreateTopicsRequestTopic) int64 {
	switch {
	case len(t.ReplicaAssignment) > 0:
		return int64(len(t.ReplicaAssignment))
	case t.NumPartitions > 0:
		return int64(t.NumPartitions)
	case b != nil:
		return int64(max(b.defaultPartitions, 1))
	}
	return 1
}

// refuse returns why n more partitions are refused, and true if they are.
func (b *fdBudget) refuse(n int64) (refusal, bool) {
	if b == nil || n <= 0 {
		return refusal{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.counted) > fdRecount || b.open+n*fdsPerPartition > b.limit-fdReserve(b.limit) {
		b.open, b.limit, b.ok = processFiles()
		b.counted = time.Now()
	}
	if !b.ok {
		return refusal{}, false
	}
	open, limit, reserve := b.open, b.limit, fdReserve(b.limit)
	if open+n*fdsPerPartition <= limit-reserve {
		b.open += n * fdsPerPartition
		return refusal{}, false
	}
	return refusal{kerr.PolicyViolation.Code, fmt.Sprintf(
		"the embedded broker has %d of its %d files open (ulimit -n) and keeps %d open for each partition of its data dir: "+
			"%d more partitions would leave fewer than %d for connections. Raise ulimit -n, keep queues on a lane (onceq serve --lane), "+
			"delete unused topics, or use a Kafka cluster",
		open, limit, fdsPerPartition, n, reserve)}, true
}
