package broker_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// TestKeyPartitionerPlacesKeysAsKafka checks KeyPartitioner against
// franz-go's partitioner that mirrors Kafka's default for keyed records,
// over keys of every length up to 64 bytes and 1 to 1,000 partitions.
func TestKeyPartitionerPlacesKeysAsKafka(t *testing.T) {
	ours := broker.KeyPartitioner().ForTopic("t")
	theirs := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20_000; i++ {
		key := make([]byte, rng.IntN(65))
		for j := range key {
			key[j] = byte(rng.IntN(256))
		}
		n := 1 + rng.IntN(1000)
		r := &kgo.Record{Key: key}
		if !ours.RequiresConsistency(r) {
			t.Fatalf("key %x: not placed consistently", key)
		}
		if got, want := ours.Partition(r, n), theirs.Partition(r, n); got != want {
			t.Fatalf("key %x over %d partitions: partition %d, want %d as Kafka places it", key, n, got, want)
		}
	}
}

// TestKeyPartitionerWithoutKey spreads records without a key over every
// partition.
func TestKeyPartitionerWithoutKey(t *testing.T) {
	p := broker.KeyPartitioner().ForTopic("t")
	seen := map[int]bool{}
	for i := 0; i < 10_000 && len(seen) < 8; i++ {
		n := p.Partition(&kgo.Record{}, 8)
		if n < 0 || n >= 8 {
			t.Fatalf("partition %d of 8", n)
		}
		seen[n] = true
	}
	if len(seen) != 8 {
		t.Fatalf("records without a key went to partitions %v of 8, want all 8", fmt.Sprint(seen))
	}
}
