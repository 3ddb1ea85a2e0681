// Package broker connects onceq to Kafka: connection options (seed brokers,
// TLS, SASL), the embedded single-node broker used for development and
// demos, topic administration, and the names of onceq's internal topics.
//
// Production points Conn.Brokers at a Kafka or Redpanda cluster. The
// embedded broker is franz-go's kfake, speaking the real Kafka protocol over
// TCP and persisting its log to a data directory:
//
//	emb, err := broker.StartEmbedded(broker.EmbeddedConfig{DataDir: "./onceq-data/broker"})
//	if err != nil { ... }
//	defer emb.Close()
//	conn := broker.Conn{Brokers: []string{emb.Addr()}}
//	adm, err := broker.NewAdmin(conn)
//	err = adm.EnsureTopic(ctx, "emails", 8, nil)
//
// Member is the one exactly-once consumer group member that the worker and
// the delay service each run: franz-go's GroupTransactSession with the
// options they share (read_committed, session and heartbeat, the
// transactional ID from the group and instance ID, the classic or KIP-848
// group protocol, health hooks, group callbacks), each adding its own
// (MemberConfig.Opts). Its Commit runs one transaction (RunTxn) that
// commits the offsets the caller gives instead of the polled position,
// and aborts when the last sync took a partition of it away (Assignment).
// MemberHealth is Run's phase and the member's brokers and group, behind
// the components' Healthy and Ready.
//
// A data dir whose broker was killed is recovered before the broker loads
// it: the transactions it left open get their commit or abort markers and
// their producers are fenced, as a Kafka transaction coordinator does when
// it takes over (see recover.go).
package broker
