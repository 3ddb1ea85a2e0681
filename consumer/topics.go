package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

// topicCache checks that the topics a worker writes to exist, asking the
// brokers once per topic. onceq's own topics (delay buckets, dead letters)
// are created when missing; a missing user queue is an error.
type topicCache struct {
	adm *broker.Admin
	ok  sync.Map // topic -> struct{}
}

func newTopicCache(adm *broker.Admin) *topicCache { return &topicCache{adm: adm} }

func (c *topicCache) known(topic string) { c.ok.Store(topic, struct{}{}) }

func (c *topicCache) ensure(topic string) error {
	if _, ok := c.ok.Load(topic); ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	switch {
	case strings.HasPrefix(topic, broker.DelayPrefix):
		err = c.adm.EnsureTopic(ctx, topic, delay.DefaultBucketPartitions, delay.BucketTopicConfigs())
	case strings.HasPrefix(topic, broker.DLQPrefix):
		err = c.adm.EnsureTopic(ctx, topic, 1, nil)
	default:
		_, err = c.adm.DescribeTopic(ctx, topic)
		if errors.Is(err, broker.ErrTopicNotFound) {
			err = fmt.Errorf("queue %q does not exist: create it with 'onceq topics create %s'", topic, topic)
		}
	}
	if err == nil {
		c.known(topic)
	}
	return err
}
