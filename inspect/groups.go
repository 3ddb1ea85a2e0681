package inspect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

// groupStats fills the Groups of sts: every consumer group that commits
// on, or is assigned, one of their queues, with the tasks it has not
// committed yet. Whatever the number of queues in sts, and of queues the
// groups consume, it costs the same few requests: the groups described,
// their offsets on these queues alone, the queues' start and end offsets,
// and the records past the offsets counted.
func (in *Inspector) groupStats(ctx context.Context, sts []QueueStats) error {
	kad := in.adm.Kadm()
	described, err := kad.DescribeGroups(ctx)
	if se, ok := errors.AsType[*kadm.ShardErrors](err); ok && !se.AllFailed {
		err = nil // the groups of the coordinators that answered
	}
	if err != nil {
		return fmt.Errorf("inspect: describing the consumer groups: %w", err)
	}
	topics := make([]string, len(sts))
	for i, st := range sts {
		topics[i] = onceq.QueueTopic(st.Queue)
	}
	counts, err := in.adm.PartitionCounts(ctx, topics...)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	parts := map[string][]int32{}
	for q, n := range counts {
		for p := range n {
			parts[q] = append(parts[q], p)
		}
	}
	var groups []string
	for g, d := range described {
		if d.Err == nil {
			groups = append(groups, g)
		}
	}
	if len(parts) == 0 || len(groups) == 0 {
		return nil
	}
	committed, err := in.adm.CommittedOffsets(ctx, groups, parts)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	topics = slices.Sorted(maps.Keys(parts))
	starts, err := kad.ListStartOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("inspect: the queues' start offsets: %w", err)
	}
	ends, err := kad.ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("inspect: the queues' end offsets: %w", err)
	}
	type key struct{ queue, group string }
	spans := map[key][]*broker.Span{}
	var all []*broker.Span
	slices.Sort(groups)
	for _, g := range groups {
		commits := kadm.OffsetResponses{}
		for t, ps := range committed[g] {
			for p, at := range ps {
				commits.Add(kadm.OffsetResponse{Offset: kadm.Offset{Topic: t, Partition: p, At: at, LeaderEpoch: -1}})
			}
		}
		d := described[g]
		lag := kadm.CalculateGroupLagWithStartOffsets(d, commits, starts, ends)
		for i := range sts {
			st := &sts[i]
			topic := onceq.QueueTopic(st.Queue)
			ps, ok := lag[topic]
			if !ok {
				continue
			}
			st.Groups = append(st.Groups, GroupStats{Group: g, State: d.State, Members: len(d.Members), Exact: true})
			for p, l := range ps {
				if l.Lag <= 0 {
					continue
				}
				sp := &broker.Span{Topic: topic, Partition: p, From: l.End.Offset - l.Lag, End: l.End.Offset, Skip: otherQueue(st.Queue)}
				all = append(all, sp)
				spans[key{st.Queue, g}] = append(spans[key{st.Queue, g}], sp)
			}
		}
	}
	if err := broker.CountRecords(ctx, in.cfg.conn, all, delay.StatsSampleOffsets, delay.StatsSampleBytes, countTimeout); err != nil {
		return fmt.Errorf("inspect: counting the tasks waiting: %w", err)
	}
	for i := range sts {
		for j := range sts[i].Groups {
			g := &sts[i].Groups[j]
			for _, sp := range spans[key{sts[i].Queue, g.Group}] {
				n, exact := sp.Counted()
				g.Waiting += n
				g.Exact = g.Exact && exact
			}
		}
	}
	return nil
}

// otherQueue says which records of a queue's topic are tasks of another
// queue: the lane queues of a lane share its topic with the lane's own
// queue, each task naming its queue in its onceq-queue header.
func otherQueue(queue string) func(*kgo.Record) bool {
	return func(r *kgo.Record) bool {
		// A record without a valid header is its topic's, whose worker
		// dead-letters a malformed one.
		if q, found, err := onceq.PeekQueue(r); found && err == nil {
			return q != queue
		}
		return r.Topic != queue
	}
}
