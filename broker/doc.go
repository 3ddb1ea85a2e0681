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
package broker
