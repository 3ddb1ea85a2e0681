// Package kafkatest runs Apache Kafka for tests and development: KRaft
// nodes that are each broker and controller, one or three of them on
// loopback with free ports, from Maven Central's jars.
//
// Jars gathers a Kafka version's classpath once, with Maven and the
// pom.xml beside this file, into a cache directory that later runs reuse
// ($ONCEQ_KAFKA_CACHE, else the user's cache directory, as
// onceq/kafka/<version>). Start formats each node's log directory with
// Kafka's storage tool (kafka.tools.StorageTool), starts kafka.Kafka in a
// JVM per node and returns once every node answers a metadata request
// naming every node. A Cluster stops its nodes by PID (Close), and
// SIGKILLs (Kill), stops (Stop) and starts again (Restart) one node at a
// time, for fault tests.
//
// The nodes are tuned for tests on a small machine (DefaultProps): no
// initial rebalance delay, a timed-out transaction aborted within a
// second, KIP-848 assignments at once, fenced brokers noticed within
// seconds. Each node keeps its data and logs under Config.Dir; a node
// that fails to start is reported with the tail of its logs.
//
// Java 17 or later (java on PATH, or $JAVA_HOME/bin/java) and Maven (mvn)
// are needed; Maven only the first time a version is used.
package kafkatest
