// Command kafka runs Apache Kafka for development (make kafka): one node,
// or -nodes 3, on free loopback ports, until Ctrl-C. It prints the seeds
// to give onceq (--brokers, ONCEQ_BROKERS) and removes the cluster's data
// when it stops, unless -dir names a directory to keep it in.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/onceq/onceq/internal/kafkatest"
)

func main() {
	version := flag.String("version", kafkatest.DefaultVersion, "Kafka version, from Maven Central")
	nodes := flag.Int("nodes", 1, fmt.Sprintf("nodes, each broker and controller: 1 to %d", kafkatest.MaxNodes))
	txn := flag.Int("transaction-version", 0, "transaction.version to format with: 1 (before KIP-890) or 2; 0: Kafka's default")
	dir := flag.String("dir", "", "directory of the nodes' data and logs, kept; default: a temporary one, removed at exit")
	flag.Parse()
	if err := run(*version, *nodes, *txn, *dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(version string, nodes, txn int, dir string) error {
	if txn < 0 || txn > 2 {
		return fmt.Errorf("-transaction-version %d: want 0, 1 or 2", txn)
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "onceq-kafka-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := kafkatest.Config{Dir: dir, Version: version, Nodes: nodes}
	if txn > 0 {
		cfg.Features = map[string]int{"transaction.version": txn}
	}
	c, err := kafkatest.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("Kafka %s: %d node(s), logs in %s\nseeds: %s\n  export ONCEQ_BROKERS=%s\nCtrl-C stops it.\n",
		c.Version(), c.Nodes(), dir, strings.Join(c.Seeds(), ","), strings.Join(c.Seeds(), ","))
	<-ctx.Done()
	fmt.Println("stopping Kafka")
	return nil
}
