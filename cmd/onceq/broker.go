package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/internal/ops"
)

func newBrokerCmd(g *globals) *cobra.Command {
	var (
		cfg         embedded.Config
		metricsAddr string
		autoCreate  bool
	)
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the embedded Kafka broker (development, tests and demos)",
		Long: `Run the embedded broker: franz-go's kfake, speaking the Kafka protocol over
TCP, persisted to --data-dir. Any Kafka client can use it. Production runs
on a Kafka or Redpanda cluster instead (--brokers).

With --nodes N it is a cluster of N brokers in this one process, sharing
one log: node i listens on --listen's port plus i (9092, 9093, 9094), or
each node on a free port when that port is 0; the "broker listening" line
names them all, the first as addr. Partition leaders and group and
transaction coordinators are spread over the nodes; --move-leaders-every
moves them all at that interval, as elections would, to test clients
under failovers.

Like Kafka by default, it creates a topic on first use when a client asks
for it (kcat and librdkafka producers do; --auto-create=false turns that
off), with --partitions partitions. It refuses what a Kafka broker refuses
and what its data dir could not store: topic names over 249 bytes or with
bytes other than letters, digits, '.', '_' and '-', more than 10,000
partitions, and topic configs it does not act on or that are malformed.

It stops cleanly on SIGINT or SIGTERM, flushing its data dir.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Partitions < 1 || cfg.Partitions > broker.MaxPartitions {
				return usagef("--partitions %d: want 1 to %d", cfg.Partitions, broker.MaxPartitions)
			}
			if cfg.Nodes < 1 || cfg.Nodes > embedded.MaxNodes {
				return usagef("--nodes %d: want 1 to %d", cfg.Nodes, embedded.MaxNodes)
			}
			if cfg.MoveLeadersEvery < 0 || (cfg.MoveLeadersEvery > 0 && cfg.MoveLeadersEvery < embedded.MinMoveLeadersEvery) {
				return usagef("--move-leaders-every %v: want 0 (never) or at least %v", cfg.MoveLeadersEvery, embedded.MinMoveLeadersEvery)
			}
			cfg.NoAutoCreate = !autoCreate
			cfg.Logger = g.log
			emb, err := embedded.Start(cfg)
			if err != nil {
				return err
			}
			if metricsAddr != "" {
				srv, err := ops.Listen(metricsAddr, ops.NewRegistry(), nil, g.log, false)
				if err != nil {
					emb.Close()
					return usageError{err}
				}
				defer srv.Close()
			}
			g.log.Info("broker listening", "addr", emb.Addr(), "nodes", strings.Join(emb.Addrs(), ","), "data_dir", cfg.DataDir,
				"cluster_id", emb.ClusterID(), "sync", cfg.Sync, "move_leaders_every", cfg.MoveLeadersEvery)
			emb.Run(cmd.Context())
			g.log.Info("broker stopped", "addr", emb.Addr())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:9092", "address to listen on and advertise, host:port (port 0: any free port); with --nodes, the first node's")
	f.IntVar(&cfg.Nodes, "nodes", 1, "brokers in the cluster, 1 to 9: node i on --listen's port plus i (port 0: each on a free port)")
	f.DurationVar(&cfg.MoveLeadersEvery, "move-leaders-every", 0, "for tests: move partition leaders and coordinators across the nodes at this interval, at least 100ms (0: never)")
	f.StringVar(&cfg.DataDir, "data-dir", "./onceq-data/broker", "directory persisting the log, groups and transactions (empty: memory only)")
	f.IntVar(&cfg.Partitions, "partitions", 8, "partitions of topics created without a count and of auto-created topics")
	f.BoolVar(&autoCreate, "auto-create", true, "create a topic on first use when a client asks for it, as Kafka does")
	f.BoolVar(&cfg.Sync, "sync", false, "fsync every produced batch (slower; survives power loss)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (empty: off)")
	return cmd
}
