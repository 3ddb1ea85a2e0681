package embedded

import (
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// boundRebalances caps the rebalance timeout of every classic JoinGroup at
// half the member's session timeout before kfake takes the join.
//
// kfake counts the members waiting in a join to know when a rebalance is
// complete, and its count can fall one short of the truth: when a static
// member's replacement joins (a restarted worker, same instance ID) while
// the member it replaces still waits in SyncGroup, kfake takes one off
// the count for the removed member as if it had been waiting in a join.
// The group then completes only at its rebalance deadline, which kfake
// sets again at every join. With franz-go's default rebalance timeout
// (60s) the members' JoinGroup requests time out first (60s plus 10s),
// they join again, the deadline moves again, and a group of restarting
// workers stayed in PreparingRebalance for minutes while its partitions
// went unconsumed. kfake also drops a member waiting in a join once its
// session times out, without answering the join; Kafka keeps such a
// member. A deadline below the session timeout ends the rebalance before
// either happens: a short count costs at most that deadline.
//
// The cap asks of each member what a onceq member does anyway: rejoin
// within half its session timeout of a rebalance starting. Its heartbeat,
// which learns of the rebalance, comes every third of the session, and
// its revoke callback does not wait for work. A member later than that
// leaves the generation and joins the next one, as on Kafka. Only the
// embedded broker does this; Kafka and Redpanda have neither miscount.
func boundRebalances(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.JoinGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.JoinGroupRequest)
		if limit := req.SessionTimeoutMillis / 2; limit > 0 && req.RebalanceTimeoutMillis > limit {
			req.RebalanceTimeoutMillis = limit
		}
		return nil, nil, false
	})
}
