package broker

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxTopicConfigLen bounds a topic config's value, in bytes. Kafka's values
// are numbers, names and short lists; a longer one is a mistake.
const MaxTopicConfigLen = 4096

// checkValue returns "" for a valid config value, and what is wrong
// otherwise.
type checkValue func(string) string

// topicConfigs are Kafka's topic-level configs (Kafka 4's TopicConfig and
// the ones older brokers still take), each with the check of its value.
// Names with a vendor's prefix (redpanda., confluent.) pass unchecked: their
// brokers judge them.
var topicConfigs = map[string]checkValue{
	"cleanup.policy":                          listOf("delete", "compact"),
	"compression.type":                        oneOf("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
	"compression.gzip.level":                  intIn(-1, 9),
	"compression.lz4.level":                   intIn(1, 17),
	"compression.zstd.level":                  intIn(-131072, 22),
	"delete.retention.ms":                     intIn(0, math.MaxInt64),
	"file.delete.delay.ms":                    intIn(0, math.MaxInt64),
	"flush.messages":                          intIn(1, math.MaxInt64),
	"flush.ms":                                intIn(0, math.MaxInt64),
	"follower.replication.throttled.replicas": anyValue,
	"index.interval.bytes":                    intIn(0, math.MaxInt32),
	"leader.replication.throttled.replicas":   anyValue,
	"local.retention.bytes":                   intIn(-2, math.MaxInt64),
	"local.retention.ms":                      intIn(-2, math.MaxInt64),
	"max.compaction.lag.ms":                   intIn(1, math.MaxInt64),
	"max.message.bytes":                       intIn(0, math.MaxInt32),
	"message.downconversion.enable":           boolean,
	"message.format.version":                  anyValue,
	"message.timestamp.after.max.ms":          intIn(0, math.MaxInt64),
	"message.timestamp.before.max.ms":         intIn(0, math.MaxInt64),
	"message.timestamp.difference.max.ms":     intIn(0, math.MaxInt64),
	"message.timestamp.type":                  oneOf("CreateTime", "LogAppendTime"),
	"min.cleanable.dirty.ratio":               ratio,
	"min.compaction.lag.ms":                   intIn(0, math.MaxInt64),
	"min.insync.replicas":                     intIn(1, math.MaxInt32),
	"preallocate":                             boolean,
	"remote.log.copy.disable":                 boolean,
	"remote.log.delete.on.disable":            boolean,
	"remote.storage.enable":                   boolean,
	"retention.bytes":                         intIn(-1, math.MaxInt64),
	"retention.ms":                            intIn(-1, math.MaxInt64),
	"segment.bytes":                           intIn(14, math.MaxInt32),
	"segment.index.bytes":                     intIn(4, math.MaxInt32),
	"segment.jitter.ms":                       intIn(0, math.MaxInt64),
	"segment.ms":                              intIn(1, math.MaxInt64),
	"unclean.leader.election.enable":          boolean,
}

// vendorPrefixes start the configs of Kafka-compatible brokers that Kafka
// does not know.
var vendorPrefixes = []string{"redpanda.", "confluent."}

// ValidateTopicConfigs checks topic configs before they are sent: every
// name must be one of Kafka's topic configs (or carry a vendor's prefix,
// redpanda. or confluent.) and every value must suit its config and have
// at most MaxTopicConfigLen bytes. The error wraps ErrConfig and names the
// config.
func ValidateTopicConfigs(configs map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		if p := TopicConfigProblem(k, configs[k]); p != "" {
			return topicErr("%s", p)
		}
	}
	return nil
}

// KnownTopicConfig reports whether k is one of Kafka's topic configs.
func KnownTopicConfig(k string) bool {
	_, ok := topicConfigs[k]
	return ok
}

// TopicConfigProblem returns "" for a valid topic config and what is wrong
// otherwise (see ValidateTopicConfigs).
func TopicConfigProblem(k, v string) string {
	if len(v) > MaxTopicConfigLen {
		return fmt.Sprintf("topic config %s: a value of %d bytes is over the limit of %d", k, len(v), MaxTopicConfigLen)
	}
	check, ok := topicConfigs[k]
	if !ok {
		for _, p := range vendorPrefixes {
			if strings.HasPrefix(k, p) {
				return ""
			}
		}
		return fmt.Sprintf("topic config %q is not a Kafka topic config: use one of %s", k, strings.Join(slices.Sorted(maps.Keys(topicConfigs)), ", "))
	}
	if p := check(v); p != "" {
		return fmt.Sprintf("topic config %s=%q: %s", k, v, p)
	}
	return ""
}

func anyValue(string) string { return "" }

func boolean(v string) string {
	if v != "true" && v != "false" {
		return "want true or false"
	}
	return ""
}

func ratio(v string) string {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return "want a number from 0 to 1"
	}
	return ""
}

func intIn(lo, hi int64) checkValue {
	return func(v string) string {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			if hi == math.MaxInt64 || hi == math.MaxInt32 {
				return fmt.Sprintf("want a whole number of at least %d", lo)
			}
			return fmt.Sprintf("want a whole number from %d to %d", lo, hi)
		}
		return ""
	}
}

func oneOf(values ...string) checkValue {
	return func(v string) string {
		if !slices.Contains(values, v) {
			return "want one of " + strings.Join(values, ", ")
		}
		return ""
	}
}

func listOf(values ...string) checkValue {
	return func(v string) string {
		for _, item := range strings.Split(v, ",") {
			if !slices.Contains(values, strings.TrimSpace(item)) {
				return "want " + strings.Join(values, ", ") + " or a comma-separated list of them"
			}
		}
		return ""
	}
}
