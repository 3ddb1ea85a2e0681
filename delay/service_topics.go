package delay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceq/onceq/broker"
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
	details, err := c.adm.Kadm().ListTopics(ctx, name)
	if err != nil {
		return false, err
	}
	d, ok := details[name]
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		c.missing[name] = time.Now()
		return false, nil
	case d.Err != nil:
		return false, d.Err
	}
	delete(c.missing, name)
	c.known[name] = true
	return true, nil
}

// deadLetters makes sure a dead-letter topic exists.
func (c *topicCache) deadLetters(ctx context.Context, name string) error {
	if c.known[name] {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.adm.EnsureTopic(ctx, name, 1, nil); err != nil {
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
		return "d-" + randomHex(), nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("delay: state dir: %w", err)
	}
	path := filepath.Join(dir, instanceIDFile)
	b, err := os.ReadFile(path)
	if id := strings.TrimSpace(string(b)); err == nil && id != "" {
		return id, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("delay: reading the instance ID: %w", err)
	}
	id := "d-" + randomHex()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("delay: writing the instance ID: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("delay: writing the instance ID: %w", err)
	}
	return id, nil
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func bucketLabel(b time.Duration) string { return broker.FormatBucket(b) }
