package broker

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Prefixes of onceq's internal topics. Queue names may not use "onceq-".
const (
	DelayPrefix     = "onceq-delay-"
	DLQPrefix       = "onceq-dlq-"
	ChangelogPrefix = "onceq-changelog-"
)

// DelayTopic names the delay bucket topic for d: onceq-delay-1s,
// onceq-delay-2m, onceq-delay-1d, onceq-delay-250ms.
func DelayTopic(d time.Duration) string { return DelayPrefix + FormatBucket(d) }

// FormatBucket writes a bucket duration in its largest whole unit: 1d, 6h,
// 10m, 30s or 100ms.
func FormatBucket(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// ParseBucket reads a bucket duration as FormatBucket writes it, and also
// accepts Go durations ("90s", "1h30m").
func ParseBucket(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 32)
		if err == nil && days > 0 {
			return time.Duration(days) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("broker: bucket %q: want a positive whole number of milliseconds such as 100ms, 5s, 2m, 6h or 1d", s)
	}
	return d, nil
}

// DLQTopic names the dead-letter topic of a queue.
func DLQTopic(queue string) string { return DLQPrefix + queue }

// ChangelogTopic names the compacted checkpoint changelog of a group's
// consumption of a queue.
func ChangelogTopic(group, queue string) string { return ChangelogPrefix + group + "-" + queue }

// IsInternal reports whether a topic belongs to onceq or Kafka itself.
func IsInternal(topic string) bool {
	return strings.HasPrefix(topic, "onceq-") || strings.HasPrefix(topic, "__")
}
