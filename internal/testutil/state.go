package testutil

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq/broker"
)

// BrokerState describes what a stalled test needs to know about the broker:
// every consumer group's state, members and partitions with lag; every
// partition whose last stable offset trails its high watermark (a
// transaction still open); the topics that hold records; and every
// transaction not yet ended. It never
// fails: what it cannot read it says it could not.
func BrokerState(conn broker.Conn) string {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return "broker state: " + err.Error()
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := adm.Kadm()
	var b strings.Builder

	groups, err := k.ListGroups(ctx)
	if err != nil {
		fmt.Fprintf(&b, "groups: %v\n", err)
	}
	lags, err := k.Lag(ctx, groups.Groups()...)
	if err != nil {
		fmt.Fprintf(&b, "group lag: %v\n", err)
	}
	for _, g := range lags.Sorted() {
		fmt.Fprintf(&b, "group %s: %s, %d members", g.Group, g.State, len(g.Members))
		if err := g.Error(); err != nil {
			fmt.Fprintf(&b, ", error %v", err)
		}
		for _, l := range g.Lag.Sorted() {
			if l.Lag != 0 {
				who := "unassigned"
				if l.Member != nil {
					who = l.Member.ClientID
				}
				fmt.Fprintf(&b, "; %s/%d lag %d (commit %d, end %d, %s)", l.Topic, l.Partition, l.Lag, l.Commit.At, l.End.Offset, who)
			}
		}
		b.WriteString("\n")
	}
	// KIP-848 groups: DescribeGroups above shows no members of these.
	if described, err := k.DescribeConsumerGroups(ctx); err == nil {
		for _, g := range described.Sorted() {
			if g.Err != nil {
				continue
			}
			fmt.Fprintf(&b, "consumer group %s: %s, epoch %d, assignment epoch %d, %d members\n", g.Group, g.State, g.Epoch, g.AssignmentEpoch, len(g.Members))
			for _, m := range g.Members {
				fmt.Fprintf(&b, "  member %s (%s) epoch %d: assigned %v, target %v\n", m.MemberID, m.ClientID, m.MemberEpoch, m.Assignment.Sorted(), m.TargetAssignment.Sorted())
			}
		}
	}

	topics, err := k.ListTopics(ctx)
	if err != nil {
		fmt.Fprintf(&b, "topics: %v\n", err)
	}
	names := topics.Names()
	ends, err := k.ListEndOffsets(ctx, names...)
	if err != nil {
		fmt.Fprintf(&b, "end offsets: %v\n", err)
	}
	stable, err := k.ListCommittedOffsets(ctx, names...)
	if err != nil {
		fmt.Fprintf(&b, "stable offsets: %v\n", err)
	}
	var open []string
	ends.Each(func(o kadm.ListedOffset) {
		s, ok := stable.Lookup(o.Topic, o.Partition)
		if ok && s.Offset != o.Offset {
			open = append(open, fmt.Sprintf("%s/%d stable %d end %d", o.Topic, o.Partition, s.Offset, o.Offset))
		}
	})
	sort.Strings(open)
	fmt.Fprintf(&b, "partitions with an open transaction: %d %s\n", len(open), strings.Join(open, ", "))
	held := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { held[o.Topic] += o.Offset })
	var sizes []string
	for _, name := range names {
		if held[name] > 0 {
			sizes = append(sizes, fmt.Sprintf("%s %d", name, held[name]))
		}
	}
	fmt.Fprintf(&b, "topics holding records (end offsets summed): %s\n", strings.Join(sizes, ", "))

	txns, err := k.ListTransactions(ctx, nil, nil)
	if err != nil {
		fmt.Fprintf(&b, "transactions: %v\n", err)
	}
	for _, tx := range txns.Sorted() {
		if tx.State != "Empty" && tx.State != "CompleteCommit" && tx.State != "CompleteAbort" {
			fmt.Fprintf(&b, "transaction %s (producer %d): %s\n", tx.TxnID, tx.ProducerID, tx.State)
		}
	}
	return b.String()
}
