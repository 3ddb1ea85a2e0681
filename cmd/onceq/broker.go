package main

import (
	"github.com/spf13/cobra"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/ops"
)

func newBrokerCmd(g *globals) *cobra.Command {
	var (
		cfg         broker.EmbeddedConfig
		metricsAddr string
	)
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the embedded single-node Kafka broker (development and demos)",
		Long: `Run the embedded single-node broker: franz-go's kfake, speaking the Kafka
protocol over TCP, persisted to --data-dir. Any Kafka client can use it.
Production runs on a Kafka or Redpanda cluster instead (--brokers).

It stops cleanly on SIGINT or SIGTERM, flushing its data dir.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Partitions < 1 {
				return usagef("--partitions %d: want 1 or more", cfg.Partitions)
			}
			cfg.Logger = g.log
			emb, err := broker.StartEmbedded(cfg)
			if err != nil {
				return err
			}
			if metricsAddr != "" {
				srv, err := ops.Listen(metricsAddr, ops.NewRegistry(), nil, g.log)
				if err != nil {
					emb.Close()
					return usageError{err}
				}
				defer srv.Close()
			}
			g.log.Info("broker listening", "addr", emb.Addr(), "data_dir", cfg.DataDir, "cluster_id", emb.ClusterID(), "sync", cfg.Sync)
			emb.Run(cmd.Context())
			g.log.Info("broker stopped", "addr", emb.Addr())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:9092", "address to listen on and advertise, host:port (port 0: any free port)")
	f.StringVar(&cfg.DataDir, "data-dir", "./onceq-data/broker", "directory persisting the log, groups and transactions (empty: memory only)")
	f.IntVar(&cfg.Partitions, "partitions", 8, "default partitions of topics created without a count")
	f.BoolVar(&cfg.Sync, "sync", false, "fsync every produced batch (slower; survives power loss)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve /metrics and /healthz on this address (empty: off)")
	return cmd
}
