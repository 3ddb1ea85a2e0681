package serve

import "time"

// SetMaxLaneIndex sets how many records of its lane's backlog a server
// keeps, for the servers a test starts after, until restore.
func SetMaxLaneIndex(n int) (restore func()) {
	old := maxLaneIndex
	maxLaneIndex = n
	return func() { maxLaneIndex = old }
}

// ReleaseAfter sets how long a task no consumer asks for waits past the
// worker's last want of its queue before it goes back to its queue
// (pull.ReleaseAfter, 30s): tests shorten it.
func ReleaseAfter(d time.Duration) Opt { return optFunc(func(cfg *config) { cfg.releaseAfter = d }) }

// AckRunWait sets how long an acknowledgment waits for the commit of a
// run no handler of its server holds, once it had the queue fetched
// (pull.AckRunWait, 10s): tests shorten it.
func AckRunWait(d time.Duration) Opt { return optFunc(func(cfg *config) { cfg.ackRunWait = d }) }

// Offered is how many tasks of topic (a namespace's queue, <ns>.<queue>)
// the server's handlers offer to its consumers now.
func Offered(s *Server, topic string) int { return s.pull.Offered(topic) }

// Owns says whether s's pull worker owns a partition of topic now.
func Owns(s *Server, topic string) bool { return s.pull.Owns(topic) }

// QueueOf is the queue that holds namespace ns's queue q on s: its topic,
// or its lane queue.
func QueueOf(s *Server, ns, q string) string {
	topic, err := s.queueOf(ns, q)
	if err != nil {
		panic(err)
	}
	return topic
}
