package testutil

import "github.com/onceq/onceq/broker/embedded"

// Leaders is the leader node of each partition of topic on emb, for tests
// that check leaders moved (embedded.Broker.MoveLeaders).
func Leaders(emb *embedded.Broker, topic string, partitions int32) []int32 {
	out := make([]int32, partitions)
	for p := range partitions {
		out[p] = emb.Cluster().LeaderFor(topic, p)
	}
	return out
}
