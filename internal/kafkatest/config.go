package kafkatest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MaxNodes is the most nodes Start runs.
const MaxNodes = 5

// Config says what cluster Start runs.
type Config struct {
	// Dir holds each node's data, configuration and logs (node-<id>/).
	// Required: a test's t.TempDir(), for example.
	Dir string
	// Version is the Kafka version: its jars come from Maven Central
	// through Jars. Default DefaultVersion.
	Version string
	// Nodes is how many nodes, each broker and controller, of one static
	// quorum: 1 to MaxNodes. Default 1. Topics of a cluster of several
	// are replicated three ways (or on every node, below three) with two
	// replicas in sync, its internal topics too.
	Nodes int
	// Features are the feature levels the storage tool formats with (its
	// --feature), for example {"transaction.version": 1} for transactions
	// before KIP-890 or {"group.version": 0} for no KIP-848 groups.
	// Default: the version's own (on 4.x, transaction.version 2 and
	// group.version 1).
	Features map[string]int
	// Props are server properties set on every node over DefaultProps.
	Props map[string]string
	// Heap is the JVM's -Xmx of each node. Default "768m".
	Heap string
}

func (c *Config) fill() error {
	if c.Dir == "" {
		return fmt.Errorf("kafkatest: Config.Dir is empty: give a directory for the nodes' data and logs")
	}
	if c.Version == "" {
		c.Version = DefaultVersion
	}
	if !versionRE.MatchString(c.Version) {
		return fmt.Errorf("kafkatest: Kafka version %q: want major.minor.patch, for example %s", c.Version, DefaultVersion)
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return fmt.Errorf("kafkatest: %d nodes: want 1 to %d", c.Nodes, MaxNodes)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Features)) {
		if c.Features[k] < 0 || strings.ContainsAny(k, "= ") {
			return fmt.Errorf("kafkatest: feature %s=%d: want a feature name and a level of 0 or more", k, c.Features[k])
		}
	}
	if c.Heap == "" {
		c.Heap = "768m"
	}
	return nil
}

// atLeast reports whether version is major.minor or later.
func atLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	maj, _ := strconv.Atoi(parts[0])
	mnr, _ := strconv.Atoi(parts[1])
	return maj > major || (maj == major && mnr >= minor)
}

// DefaultProps are the server properties of every node of a cluster of n
// nodes of Kafka version, besides its listeners, node ID, quorum and log
// directory: replication for n nodes, and timings for tests (production
// defaults in brackets).
func DefaultProps(version string, n int) map[string]string {
	rf, isr := min(n, 3), min(n, 2)
	p := map[string]string{
		"num.partitions":                                              "8", // as the embedded broker
		"default.replication.factor":                                  strconv.Itoa(rf),
		"min.insync.replicas":                                         strconv.Itoa(isr),
		"offsets.topic.replication.factor":                            strconv.Itoa(rf),
		"offsets.topic.num.partitions":                                "8", // [50]: a faster first coordinator
		"transaction.state.log.replication.factor":                    strconv.Itoa(rf),
		"transaction.state.log.min.isr":                               strconv.Itoa(isr),
		"transaction.state.log.num.partitions":                        "8", // [50]
		"share.coordinator.state.topic.replication.factor":            strconv.Itoa(rf),
		"share.coordinator.state.topic.min.isr":                       strconv.Itoa(isr),
		"group.initial.rebalance.delay.ms":                            "0",    // [3000]
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000", // [10000]
		// A killed node is fenced, and out of every ISR, within seconds.
		"broker.heartbeat.interval.ms": "500",   // [2000]
		"broker.session.timeout.ms":    "3000",  // [9000]
		"replica.lag.time.max.ms":      "10000", // [30000]
		// Fewer threads on a small machine.
		"num.network.threads":               "2", // [3]
		"num.io.threads":                    "4", // [8]
		"background.threads":                "4", // [10]
		"num.recovery.threads.per.data.dir": "1",
		"log.cleaner.dedupe.buffer.size":    "16777216", // [128 MiB]
	}
	if atLeast(version, 4, 3) {
		p["group.consumer.assignment.interval.ms"] = "0" // [1000]
	}
	return p
}

// nodeProps renders node id's server.properties: Java properties, one
// key=value a line, no trailing comments.
func nodeProps(cfg *Config, id int, voters, dataDir string, port, controllerPort int) []byte {
	p := DefaultProps(cfg.Version, cfg.Nodes)
	maps.Copy(p, map[string]string{
		"process.roles":                  "broker,controller",
		"node.id":                        strconv.Itoa(id),
		"listeners":                      fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", port, controllerPort),
		"advertised.listeners":           fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", port),
		"controller.listener.names":      "CONTROLLER",
		"inter.broker.listener.name":     "PLAINTEXT",
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"controller.quorum.voters":       voters,
		"log.dirs":                       dataDir,
	})
	maps.Copy(p, cfg.Props)
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "%s=%s\n", k, p[k])
	}
	return []byte(b.String())
}

// log4j2Props sends Kafka's logs to server.log in -Dkafka.logs.dir, at
// INFO, with the request and state-change chatter at WARN.
const log4j2Props = `status = warn
appender.server.type = File
appender.server.name = server
appender.server.fileName = ${sys:kafka.logs.dir}/server.log
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.server.ref = server
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
`
