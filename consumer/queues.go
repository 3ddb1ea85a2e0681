package consumer

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// queueSet is what a worker consumes: queues by name and queues by
// pattern. A pattern is a regular expression (Go's syntax) that a queue's
// whole name must match, such as `shop\..*` or `tenant-[0-9]+`; a queue
// argument is a pattern when it holds a character no queue name may hold
// (`*`, `+`, `?`, `[`, `(`, `|`, `^`, `$`, `\`, `{`). A '.' is a queue
// name's character, so `shop.orders` names one queue; in a pattern it
// matches any character. Patterns never match onceq's own topics.
//
// A lane queue (onceq.SplitLane) is consumed by name ("fn/resize") or by
// a pattern of labels of one lane, the lane given as it is: `fn/img-.*`.
// The worker reads the lane's topic, and acknowledges without running
// the tasks of the lane's other queues.
type queueSet struct {
	names    []string
	named    map[string]bool
	patterns []*regexp.Regexp // anchored
	texts    []string         // the patterns as given
	// topics are what the worker reads by name: the named queues' topics
	// (a lane queue's is its lane) and the lanes of lane patterns.
	topics []string
	lanes  map[string]bool // the lanes among topics
}

// patternChars are the characters that make a queue argument a pattern.
const patternChars = `*+?[]()|^$\{}`

// IsPattern says whether a queue argument (Queues) is a pattern.
func IsPattern(q string) bool { return strings.ContainsAny(q, patternChars) }

// anchored compiles a pattern to match whole names.
func anchored(p string) (*regexp.Regexp, error) { return regexp.Compile(`^(?:` + p + `)$`) }

// newQueueSet sorts queue arguments into names and patterns; the options
// checked them (validate).
func newQueueSet(qs []string) queueSet {
	s := queueSet{named: map[string]bool{}, lanes: map[string]bool{}}
	topics := map[string]bool{}
	addTopic := func(t string, lane bool) {
		if !topics[t] {
			topics[t] = true
			s.topics = append(s.topics, t)
		}
		if lane {
			s.lanes[t] = true
		}
	}
	for _, q := range qs {
		lane, _, isLane := onceq.SplitLane(q)
		if !IsPattern(q) {
			if !s.named[q] {
				s.names = append(s.names, q)
				s.named[q] = true
				addTopic(onceq.QueueTopic(q), isLane)
			}
			continue
		}
		if re, err := anchored(q); err == nil {
			s.patterns = append(s.patterns, re)
			s.texts = append(s.texts, q)
			if isLane {
				addTopic(lane, true)
			}
		}
	}
	return s
}

// topicPatterns are the patterns that match topics: those of no lane.
func (s queueSet) topicPatterns() []*regexp.Regexp {
	var out []*regexp.Regexp
	for i, re := range s.patterns {
		if _, _, lane := onceq.SplitLane(s.texts[i]); !lane {
			out = append(out, re)
		}
	}
	return out
}

// has says whether the worker consumes queue.
func (s queueSet) has(queue string) bool { return s.named[queue] || s.matches(queue) }

// matches says whether a pattern matches queue.
func (s queueSet) matches(queue string) bool {
	if broker.IsInternal(queue) {
		return false
	}
	for _, re := range s.patterns {
		if re.MatchString(queue) {
			return true
		}
	}
	return false
}

// subscription is what the Kafka client consumes: the names, or with
// patterns regular expressions for all of them.
func (s queueSet) subscription() (topics []string, regex bool) {
	patterns := s.topicPatterns()
	if len(patterns) == 0 {
		return s.topics, false
	}
	for _, n := range s.topics {
		topics = append(topics, "^"+regexp.QuoteMeta(n)+"$")
	}
	for _, re := range patterns {
		topics = append(topics, re.String())
	}
	return topics, true
}

// checkPattern is the options' check of a pattern. A pattern of lane
// queues gives its lane as it is, before the first '/': the worker reads
// that one topic.
func checkPattern(q string) error {
	if _, err := anchored(q); err != nil {
		return fmt.Errorf("%q is not a valid pattern (Go regular expression syntax, matched against whole queue names): %v", q, err)
	}
	if lane, _, ok := onceq.SplitLane(q); ok {
		if IsPattern(lane) || onceq.ValidateQueue(lane) != nil {
			return fmt.Errorf("%q: a pattern of lane queues names its lane as it is, then the labels' pattern, as in `fn/img-.*`", q)
		}
	}
	return nil
}

// changelogSpec is the changelog topic of queue, of n partitions.
func (w *Worker) changelogSpec(queue string, n int32) broker.TopicSpec {
	return broker.ChangelogSpec(w.cfg.group, queue, n)
}

// recordsSpec is the task records topic of queue, of n partitions, kept
// at least as long as the worker needs (recordsRetention): a topic a
// producer or another worker created keeping them less is raised.
func (w *Worker) recordsSpec(queue string, n int32) broker.TopicSpec {
	return broker.RecordsSpec(queue, n, w.recordsRetention())
}

// prepareQueues makes the changelog and records topics of the queues a
// pattern matched, before their partitions' first restore, and returns
// the queues it cannot serve: their group and name are too long for a
// changelog name. (Start prepares the named queues.)
func (w *Worker) prepareQueues(ctx context.Context, queues []string) (refused map[string]error, err error) {
	var todo []string
	seen := map[string]bool{} // the partitions of one queue name it once each
	for _, q := range queues {
		if seen[q] || w.topics.isPrepared(q) {
			continue
		}
		seen[q] = true
		if w.cfg.guarantee == ExactlyOnce {
			if err := broker.ValidateChangelog(w.cfg.group, q); err != nil {
				if refused == nil {
					refused = map[string]error{}
				}
				refused[q] = err
				continue
			}
		}
		todo = append(todo, q)
	}
	if len(todo) == 0 {
		return refused, nil
	}
	counts, err := w.admin.PartitionCounts(ctx, todo...)
	if err != nil {
		return refused, err
	}
	var specs []broker.TopicSpec
	for _, q := range todo {
		if w.cfg.guarantee == ExactlyOnce {
			specs = append(specs, w.changelogSpec(q, counts[q]))
		}
		if w.cfg.taskRecords {
			specs = append(specs, w.recordsSpec(q, counts[q]))
		}
	}
	made, err := w.admin.EnsureTopics(ctx, specs)
	if err != nil {
		return refused, err
	}
	for _, q := range todo {
		if w.cfg.guarantee == ExactlyOnce {
			if name := broker.ChangelogTopic(w.cfg.group, q); made[name] != counts[q] {
				if refused == nil {
					refused = map[string]error{}
				}
				refused[q] = fmt.Errorf("consumer: changelog %s has %d partitions but queue %s has %d: add partitions to the changelog", name, made[name], q, counts[q])
				continue
			}
		}
		w.topics.prepared(q)
	}
	return refused, nil
}
