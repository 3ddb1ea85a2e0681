package delay

import (
	"context"
	"fmt"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/instance"
)

// missingRecheck is how long a queue found missing is taken as missing
// before the brokers are asked again.
const missingRecheck = 10 * time.Second

// topicCache knows which queues exist and creates dead-letter topics. Only
// the service loop uses it.
type topicCache struct {
	adm     *broker.Admin
	known   map[string]bool
	missing map[string]time.Time
}

func newTopicCache(adm *broker.Admin) *topicCache {
	return &topicCache{adm: adm, known: map[string]bool{}, missing: map[string]time.Time{}}
}

// queue reports whether a queue exists. An error means the brokers could
// not tell.
func (c *topicCache) queue(ctx context.Context, name string) (bool, error) {
	if c.known[name] {
		return true, nil
	}
	if at, ok := c.missing[name]; ok && time.Since(at) < missingRecheck {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	counts, err := c.adm.PartitionCounts(ctx, name)
	if err != nil {
		return false, err
	}
	if _, ok := counts[name]; !ok {
		c.missing[name] = time.Now()
		return false, nil
	}
	delete(c.missing, name)
	c.known[name] = true
	return true, nil
}

// deadLetters makes sure a dead-letter topic exists (broker.DeadLettersSpec).
func (c *topicCache) deadLetters(ctx context.Context, name string) error {
	if c.known[name] {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.adm.EnsureTopics(ctx, []broker.TopicSpec{broker.DeadLettersSpec(name)}); err != nil {
		return err
	}
	c.known[name] = true
	return nil
}

// instanceIDFile is the file in the state dir that keeps the instance ID.
// It differs from the worker's, so a worker may give the service its own
// checkpoint dir.
const instanceIDFile = "delay-instance-id"

// loadInstanceID returns fixed, or the ID kept in dir, creating it on
// first start; without a dir, a new ID.
func loadInstanceID(dir, fixed string) (string, error) {
	if fixed != "" {
		return fixed, nil
	}
	if dir == "" {
		return instance.New("d-"), nil
	}
	id, err := instance.Load(dir, instanceIDFile, "d-")
	if err != nil {
		return "", fmt.Errorf("delay: %w", err)
	}
	return id, nil
}

func bucketLabel(b time.Duration) string { return broker.FormatBucket(b) }
