// Package embedded runs a Kafka broker in the process, for development,
// tests and demos: franz-go's kfake, speaking the real Kafka protocol over
// TCP and persisting its log to a data directory. It runs one node or a
// cluster of several (Config.Nodes) whose leaders and coordinators move on
// demand (Broker.MoveLeaders), so clients can be tested under elections; the
// nodes share one log, and the broker answers clients' questions about
// truncation after a move accordingly (epochs.go). It caps each consumer
// group member's rebalance timeout, which keeps a miscount of kfake's from
// holding a group in a rebalance (rebalance.go). It is a package of its
// own so that onceq's library packages do not link it.
//
//	emb, err := embedded.Start(embedded.Config{DataDir: "./onceq-data/broker"})
//	if err != nil { ... }
//	defer emb.Close()
//	conn := broker.Conn{Brokers: []string{emb.Addr()}}
//
// A data dir whose broker was killed is recovered before the broker loads
// it: the transactions it left open get their commit or abort markers and
// their producers are fenced, as a Kafka transaction coordinator does when
// it takes over (see recover.go).
package embedded
