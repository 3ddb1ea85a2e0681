package consumer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/onceq/onceq/broker"
)

// topicCache checks that the topics a worker writes to exist, asking the
// brokers once per topic. onceq's own topics (delay buckets, dead letters,
// the workflow queue) are created when missing, as the catalogue
// (broker.TopicSpecOf) says; a missing user queue is an error.
type topicCache struct {
	adm  *broker.Admin
	ok   sync.Map // topic -> struct{}
	prep sync.Map // queue -> struct{}: its changelog and records topics exist
	recs sync.Map // queue -> int32: its records topic exists, and the queue's partitions

	mu     sync.Mutex
	counts map[string]partitionCount
}

type partitionCount struct {
	n    int32
	seen time.Time
}

// partitionsTTL is how long a topic's partition count is trusted.
const partitionsTTL = 30 * time.Second

func newTopicCache(adm *broker.Admin) *topicCache {
	return &topicCache{adm: adm, counts: map[string]partitionCount{}}
}

// partitions returns how many partitions topic has, asking the brokers at
// most every partitionsTTL.
func (c *topicCache) partitions(topic string) (int32, error) {
	c.mu.Lock()
	pc, ok := c.counts[topic]
	c.mu.Unlock()
	if ok && time.Since(pc.seen) < partitionsTTL {
		return pc.n, nil
	}
	return c.refreshPartitions(topic)
}

// confirmPartitions asks the brokers again, unless the count was fetched
// in the last second, and reports whether it is still n: a record is
// forwarded only on a count the brokers just confirmed.
func (c *topicCache) confirmPartitions(topic string, n int32) bool {
	c.mu.Lock()
	pc := c.counts[topic]
	c.mu.Unlock()
	if time.Since(pc.seen) < time.Second {
		return pc.n == n
	}
	got, err := c.refreshPartitions(topic)
	return err == nil && got == n
}

func (c *topicCache) refreshPartitions(topic string) (int32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts, err := c.adm.PartitionCounts(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("consumer: partitions of %s: %w", topic, err)
	}
	n, ok := counts[topic]
	if !ok {
		return 0, fmt.Errorf("consumer: partitions of %s: %w", topic, broker.ErrTopicNotFound)
	}
	c.seed(map[string]int32{topic: n}, time.Now())
	return n, nil
}

// seed records partition counts the worker learned at time at: at its
// start, and from each look at its partitions' offsets (quiet.go), which
// keeps the counts of every queue it owns fresh without a request per
// queue.
func (c *topicCache) seed(counts map[string]int32, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, n := range counts {
		c.counts[t] = partitionCount{n: n, seen: at}
	}
}

func (c *topicCache) known(topic string) { c.ok.Store(topic, struct{}{}) }

// prepared records that queue's changelog and records topics exist.
func (c *topicCache) prepared(queue string) { c.prep.Store(queue, struct{}{}) }

func (c *topicCache) isPrepared(queue string) bool {
	_, ok := c.prep.Load(queue)
	return ok
}

func (c *topicCache) ensure(topic string) error {
	if _, ok := c.ok.Load(topic); ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if spec, own := broker.TopicSpecOf(topic); own {
		_, err = c.adm.EnsureTopics(ctx, []broker.TopicSpec{spec})
	} else {
		var counts map[string]int32
		if counts, err = c.adm.PartitionCounts(ctx, topic); err == nil {
			if n, ok := counts[topic]; ok {
				c.seed(map[string]int32{topic: n}, time.Now())
			} else {
				err = fmt.Errorf("queue %q does not exist: create it with 'onceq topics create %s'", topic, topic)
			}
		}
	}
	if err == nil {
		c.known(topic)
	}
	return err
}

// ensureRecords makes sure the records topic of queue, a queue the worker
// writes tasks to, exists (broker.RecordsSpec, keeping records at least
// retention), and returns the queue's partitions.
func (c *topicCache) ensureRecords(queue string, retention time.Duration) (int32, error) {
	if n, ok := c.recs.Load(queue); ok {
		return n.(int32), nil
	}
	n, err := c.partitions(queue)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.adm.EnsureTopics(ctx, []broker.TopicSpec{broker.RecordsSpec(queue, n, retention)}); err != nil {
		return 0, err
	}
	c.recs.Store(queue, n)
	return n, nil
}
