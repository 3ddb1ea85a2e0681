package serve

import (
	"strings"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

// Names: what a namespace's request names lives in the namespace, so that
// no name one namespace gives can reach another's.
//
// A queue is the topic <ns>.<queue>. Kafka takes '.' and '_' in a topic
// name for the same character (two topics that differ only there
// collide), and a namespace name may hold '_': were '.' or '_' allowed
// in a queue name, namespace shop's queue x_y and namespace shop_x's
// queue y would be one topic. So a queue name holds letters, digits and
// '-': the last '.' or '_' of a topic's name (under Kafka's rule) is then
// the one between namespace and queue, and the mapping is injective.
// Topics of such queues are <ns>.<queue> as they always were.
//
// A workflow's ID is kept as <ns>/<id> (a namespace name has no '/'):
// its start task, its joins and the IDs derived from it for its steps
// are the namespace's alone.
//
// A job's or workflow's ID is named again in a URL path segment
// (.../job/{id}, .../workflow/{id}, the console's task page), escaped as
// url.PathEscape escapes it: checkPathID refuses, at publish, the IDs
// that cannot be named so.

// checkPathID refuses an ID that does not round-trip through a URL path
// segment: "." and ".." are dot segments, which url.PathEscape leaves as
// they are and clients and net/http resolve away (GET .../job/.. is
// GET .../q), and "/" alone, escaped %2F, is taken by net/http's router
// for a trailing slash, which no {id} matches. Every other ID of
// printable bytes, '/' within it included, round-trips escaped.
func checkPathID(field, id string) error {
	switch id {
	case ".", "..", "/":
		return badRequest(field, "%q cannot be named in a URL path (.../job/%s would be read as part of the path, not as the ID): choose another ID", id, id)
	}
	return nil
}

// queueNameByte reports whether c may be in a namespace's queue name.
func queueNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

// maxTopicLen is the longest topic of a namespace's queue: it must leave
// room, within Kafka's limit, for the pull group's checkpoint changelog
// of the topic (broker.ChangelogTopic), so that every queue published to
// can be consumed; and for its dead-letter topic (onceq.MaxQueueLen).
func (s *Server) maxTopicLen() int {
	return min(onceq.MaxQueueLen, broker.MaxTopicLen-len(broker.ChangelogTopic(s.cfg.pullGroup, "")))
}

// queueIn is the name, in namespace ns, of its queue queue (the topic
// <ns>.<q> or the lane queue <lane>/<ns>.<q>): q.
func queueIn(ns, queue string) string {
	if _, label, ok := onceq.SplitLane(queue); ok {
		queue = label
	}
	return strings.TrimPrefix(queue, ns+".")
}

// queueOf is the onceq queue that holds namespace ns's queue: the topic
// <ns>.<queue>, or on a server of a lane the lane queue
// <lane>/<ns>.<queue>; or the 400 that says what is wrong with the
// queue's name.
func (s *Server) queueOf(ns, queue string) (string, error) {
	switch {
	case queue == "":
		return "", badRequest("queue", "the name is empty: give a queue name such as \"emails\"")
	case strings.Contains(queue, "/"):
		return "", badRequest("queue", "%q: a queue name has no '/'", queue)
	}
	for i := 0; i < len(queue); i++ {
		switch c := queue[i]; {
		case c == '_' && s.cfg.lane != "":
			// A lane queue's label is no topic's name: '_' is lmstfy's.
		case c == '.' || c == '_':
			return "", badRequest("queue", "%q: byte %d is %q: a queue name holds letters, digits and '-', not '.' and '_': "+
				"Kafka takes '.' and '_' in topic names for one character, so with either a queue's topic "+
				"<namespace>.<queue> could be another namespace's (shop's queue x_y and shop_x's queue y): write %s",
				queue, i, c, strings.NewReplacer(".", "-", "_", "-").Replace(queue))
		case !queueNameByte(c):
			return "", badRequest("queue", "%q: byte %d is %q: invalid queue name: use letters, digits and '-'", queue, i, c)
		}
	}
	topic := ns + "." + queue
	if s.cfg.lane != "" {
		if limit := onceq.MaxLabelLen - len(ns) - 1; len(queue) > limit {
			return "", badRequest("queue", "%q: %d bytes: at most %d in namespace %s on this server, whose queues are "+
				"lane queues <lane>/<namespace>.<queue> of lane %s (a label holds at most %d bytes): choose a shorter name",
				queue, len(queue), limit, ns, s.cfg.lane, onceq.MaxLabelLen)
		}
		topic = s.cfg.lane + string(onceq.LaneSep) + topic
		if err := onceq.ValidateLaneQueue(topic); err != nil {
			return "", badRequest("queue", "%v (the queue is lane queue <lane>/<namespace>.<queue>)", err)
		}
		return topic, nil
	}
	if limit := s.maxTopicLen(); len(topic) > limit {
		return "", badRequest("queue", "%q: %d bytes: at most %d in namespace %s, so that its topic <namespace>.<queue> "+
			"and the topics onceq keeps beside it (%s) fit Kafka's limit of %d bytes: choose a shorter name",
			queue, len(queue), limit-len(ns)-1, ns, broker.ChangelogTopic(s.cfg.pullGroup, "<topic>"), broker.MaxTopicLen)
	}
	if err := onceq.ValidateQueue(topic); err != nil {
		return "", badRequest("queue", "%v (the queue's topic is <namespace>.<queue>)", err)
	}
	return topic, nil
}
