// Package broker connects onceq to Kafka: connection options (seed brokers,
// TLS, SASL), topic administration, and the names of onceq's internal
// topics.
//
// Production points Conn.Brokers at a Kafka or Redpanda cluster; package
// embedded runs a single-node broker for development, tests and demos:
//
//	conn := broker.Conn{Brokers: []string{"kafka-1:9092", "kafka-2:9092"}}
//	adm, err := broker.NewAdmin(conn)
//	if err != nil { ... }
//	err = adm.EnsureTopic(ctx, "emails", 8, nil)
package broker
