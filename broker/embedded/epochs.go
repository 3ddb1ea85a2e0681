package embedded

import (
	"math"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// answerLeaderEpochs answers every OffsetForLeaderEpoch request in place
// of kfake: each partition's epoch ended at math.MaxInt64, that is, after
// any offset the client consumed.
//
// A client asks when a partition's leader epoch changed (MoveLeaders), to
// learn whether the new leader's log was truncated below what the client
// consumed. kfake answers from the epochs of the batches written: for an
// epoch that no batch was written in since the move it answers "undefined
// epoch" (-1), which Kafka clients take for an unclean election and
// answer by resetting to the partition's start. franz-go then delivered
// every record of the partition again: a consumer saw hundreds of
// records twice per second of moves, and exactly-once workers ran tasks
// whose offsets they had committed. Kafka's leaders keep the start offset
// of each epoch and never answer so for an epoch they have seen.
//
// The embedded broker's nodes share one log, which no move truncates, so
// "nothing was truncated" is the true answer to every such question.
// Fencing stays: a fetch with a stale CurrentLeaderEpoch is still refused
// with FENCED_LEADER_EPOCH, and the client reloads its metadata.
func answerLeaderEpochs(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, rp.LeaderEpoch, math.MaxInt64
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}
