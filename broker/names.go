package broker

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq"
)

// Kafka's limits on topics, which the edges (topic admin, the worker's and
// the producer's options, the CLI) check before anything is created, and
// which the embedded broker enforces itself for any client.
const (
	// MaxTopicLen is the longest topic name Kafka accepts, in bytes.
	MaxTopicLen = 249
	// MaxPartitions is the most partitions onceq creates in one topic. Kafka
	// sets no hard limit, but every partition costs the brokers memory and
	// file handles: a topic of 999,999,999 partitions takes a broker down.
	// 10,000 is far above what a queue needs and keeps the embedded
	// broker's partition directories (<topic>-<partition>) within the 255
	// bytes a file name may have.
	MaxPartitions = 10_000
)

// Prefixes of onceq's internal topics. Queue names may not use "onceq-".
const (
	DelayPrefix = "onceq-delay-"
	DLQPrefix   = "onceq-dlq-"
	// RecordsPrefix starts the name of a queue's task records topic (see
	// RecordsTopic). It is as long as DLQPrefix, so every valid queue has
	// both.
	RecordsPrefix = "onceq-rec-"
	// ChangelogPrefix starts the name of every checkpoint changelog (see
	// ChangelogTopic).
	ChangelogPrefix = "onceq-checkpoint-"
	// LegacyChangelogPrefix started the changelog names of earlier onceq
	// versions, onceq-changelog-<group>-<queue>, which were ambiguous (see
	// LegacyChangelogTopic).
	LegacyChangelogPrefix = "onceq-changelog-"
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

// DLQTopic names the dead-letter topic of a queue: onceq-dlq-<topic>,
// the topic being the queue's (onceq.QueueTopic): the lane queues of a
// lane share their lane's, and each dead letter names its queue in its
// onceq-queue header. The root package's ValidateQueue keeps queue names
// short enough for it to fit MaxTopicLen.
func DLQTopic(queue string) string { return DLQPrefix + onceq.QueueTopic(queue) }

// RecordsTopic names the topic of a queue's task records
// (onceq.TaskRecord): onceq-rec-<topic>, the topic being the queue's
// (onceq.QueueTopic): the lane queues of a lane share their lane's, and
// each record names its queue. The root package's ValidateQueue keeps
// queue names short enough for it to fit MaxTopicLen.
func RecordsTopic(queue string) string { return RecordsPrefix + onceq.QueueTopic(queue) }

// QueueOfRecords returns the queue whose task records topic is topic.
func QueueOfRecords(topic string) (string, bool) {
	q, ok := strings.CutPrefix(topic, RecordsPrefix)
	return q, ok && q != ""
}

// ChangelogTopic names the compacted checkpoint changelog of a group's
// consumption of a queue: onceq-checkpoint-<length of group>-<group>-<queue>,
// for example onceq-checkpoint-6-mailer-emails.
//
// The group's length makes the name injective: group and queue names may
// both contain every character Kafka allows in a topic name (letters,
// digits, '.', '_' and '-'), so no separator alone can tell where the group
// ends. The name before it, onceq-changelog-<group>-<queue>, gave group
// "a-b" with queue "c" and group "a" with queue "b-c" one topic, and the
// second group restored the first one's processed IDs and skipped its own
// tasks. Reading the length first, ParseChangelogTopic finds the one group
// and queue a name stands for. The new prefix keeps every new name apart
// from every old one, so an old changelog is recognised (see
// Admin.EnsureTopic). A hash would be injective too, but nobody could read
// it, and Kafka refuses unknown topic configs that could have held the
// names.
//
// A name must fit MaxTopicLen: check with ValidateChangelog first.
//
// The lane queues of a lane share the lane's changelog: it follows the
// lane's partitions.
func ChangelogTopic(group, queue string) string {
	return ChangelogPrefix + strconv.Itoa(len(group)) + "-" + group + "-" + onceq.QueueTopic(queue)
}

// ParseChangelogTopic returns the group and queue a changelog topic name
// (ChangelogTopic) stands for; ok is false for any other name.
func ParseChangelogTopic(topic string) (group, queue string, ok bool) {
	rest, ok := strings.CutPrefix(topic, ChangelogPrefix)
	if !ok {
		return "", "", false
	}
	digits, rest, ok := strings.Cut(rest, "-")
	n, err := strconv.Atoi(digits)
	if !ok || err != nil || n < 1 || digits != strconv.Itoa(n) || len(rest) < n+2 || rest[n] != '-' {
		return "", "", false
	}
	return rest[:n], rest[n+1:], true
}

// LegacyChangelogTopic is the name earlier onceq versions gave the
// changelog of group and queue, onceq-changelog-<group>-<queue>. Several
// pairs share a name; LegacyChangelogOwners lists them.
func LegacyChangelogTopic(group, queue string) string {
	return LegacyChangelogPrefix + group + "-" + queue
}

// GroupQueue is a consumer group's consumption of a queue.
type GroupQueue struct {
	Group, Queue string
}

// LegacyChangelogOwners returns every group and queue whose legacy
// changelog name (LegacyChangelogTopic) is topic, in order of group length:
// one for each '-' the name can be split at.
func LegacyChangelogOwners(topic string) []GroupQueue {
	rest, ok := strings.CutPrefix(topic, LegacyChangelogPrefix)
	if !ok {
		return nil
	}
	var out []GroupQueue
	for i := 1; i < len(rest)-1; i++ {
		if rest[i] == '-' {
			out = append(out, GroupQueue{rest[:i], rest[i+1:]})
		}
	}
	return out
}

// ValidateChangelog checks that the changelog topic of group and each queue
// fits Kafka's limit on topic names, MaxTopicLen: group and queue together
// may have MaxTopicLen less the prefix, the digits of the group's length
// and two dashes (227 bytes for a group of 10 to 99 bytes). The error wraps
// ErrConfig and names the limit.
func ValidateChangelog(group string, queues ...string) error {
	for _, q := range queues {
		q = onceq.QueueTopic(q) // a lane queue's changelog is its lane's
		n := len(ChangelogTopic(group, q))
		if n <= MaxTopicLen {
			continue
		}
		room := MaxTopicLen - (n - len(group) - len(q))
		return topicErr("group %q (%d bytes) with queue %q (%d bytes): their changelog topic %s<%d>-<group>-<queue> would have %d bytes, "+
			"over Kafka's limit of %d on topic names: shorten the group or the queue name to at most %d bytes together",
			group, len(group), q, len(q), ChangelogPrefix, len(group), n, MaxTopicLen, room)
	}
	return nil
}

// TopicNameProblem checks a topic name against Kafka's rules: 1 to
// MaxTopicLen bytes of letters, digits, '.', '_' and '-', and not "." or
// "..". It returns "" for a valid name and what is wrong otherwise.
func TopicNameProblem(name string) string {
	switch {
	case name == "":
		return "a topic name may not be empty"
	case name == "." || name == "..":
		return `"." and ".." are not topic names`
	case len(name) > MaxTopicLen:
		return fmt.Sprintf("the name has %d bytes, over Kafka's limit of %d on topic names", len(name), MaxTopicLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("byte %d (%q) is not allowed in a topic name: use letters, digits, '.', '_' or '-'", i, c)
		}
	}
	return ""
}

// IsInternal reports whether a topic belongs to onceq or Kafka itself.
func IsInternal(topic string) bool {
	return strings.HasPrefix(topic, "onceq-") || strings.HasPrefix(topic, "__")
}
