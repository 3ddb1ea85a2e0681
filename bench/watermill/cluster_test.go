package watermill_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
)

// cluster is the broker a benchmark runs on: an embedded broker of its
// own, or the cluster whose seed brokers ONCEQ_BENCH_BROKERS names
// (comma-separated; Apache Kafka, say: make kafka prints them), where
// its queues and groups carry the run's prefix so that runs never meet,
// and stay behind.
func cluster(b *testing.B) (conn broker.Conn, prefix string) {
	b.Helper()
	if seeds := os.Getenv("ONCEQ_BENCH_BROKERS"); seeds != "" {
		return broker.Conn{Brokers: strings.Split(seeds, ",")}, fmt.Sprintf("wm%d-", time.Now().UnixNano())
	}
	emb, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(emb.Close)
	return broker.Conn{Brokers: []string{emb.Addr()}}, ""
}
