package broker

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KeyPartitioner places a record with a key where Kafka's default
// partitioner does (murmur2 of the key, its sign bit masked, modulo the
// partitions), and one without a key on a random partition. Every client
// of onceq uses it (Conn.Opts): the tasks, records and wake-ups onceq
// writes all have keys, so a task lands where any Kafka client would put
// its key. Unlike franz-go's default, it keeps no state per topic: that
// costs a random source of 5 KiB for every topic a client writes to, 50
// MiB for a producer of 10,000 queues.
func KeyPartitioner() kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int { return partitionOf })
}

// KeyPartition is the partition of n where KeyPartitioner places a record
// of key: a task's partition in its queue (onceq.Task.PartitionKey), for
// a reader that looks a task up by its key, or a record that names it
// before the task is written.
func KeyPartition(key []byte, n int) int32 { return int32(partitionOf(&kgo.Record{Key: key}, n)) }

func partitionOf(r *kgo.Record, n int) int {
	if r.Key == nil {
		return rand.IntN(n)
	}
	return int(murmur2(r.Key)&0x7fffffff) % n
}

// murmur2 is the 32-bit MurmurHash2 with Kafka's seed, as Kafka's
// Utils.murmur2 computes it.
func murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(data))
	for ; len(data) >= 4; data = data[4:] {
		k := binary.LittleEndian.Uint32(data)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
