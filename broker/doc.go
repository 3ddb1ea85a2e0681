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
// A data dir whose broker was killed is recovered before the broker loads
// it: the transactions it left open get their commit or abort markers and
// their producers are fenced, as a Kafka transaction coordinator does when
// it takes over (see recover.go).
package broker
