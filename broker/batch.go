package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A worker over thousands of queues checks and creates thousands of topics
// at its start. One request per topic, one after another, made a worker
// over 1,000 queues wait tens of seconds to join its group; these ask
// about every topic in one metadata request and create the missing ones in
// a few CreateTopics requests.

// createBatch bounds the topics one CreateTopics request names.
const createBatch = 1000

// TopicSpec is a topic to ensure: its name, partitions and configs. The
// catalogue (catalog.go) gives the specs of onceq's own topics.
type TopicSpec struct {
	Name       string
	Partitions int32
	Configs    map[string]string
	// RaiseRetention makes Configs' retention.ms the least the topic
	// keeps: EnsureTopics raises the retention of an existing topic that
	// is shorter, and never lowers one.
	RaiseRetention bool
}

// PartitionCounts returns how many partitions each of the named topics has,
// in one metadata request. A topic that does not exist is absent from the
// map; a topic the brokers report another error for is an error. A topic
// the brokers cannot answer for yet (just made, a leader moving) is asked
// again for a few seconds.
func (a *Admin) PartitionCounts(ctx context.Context, names ...string) (map[string]int32, error) {
	counts, _, err := a.Topics(ctx, names...)
	return counts, err
}

// Topics is PartitionCounts with each topic's ID too, which tells a
// topic from another of the same name made after it was deleted.
func (a *Admin) Topics(ctx context.Context, names ...string) (map[string]int32, map[string][16]byte, error) {
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		counts, ids, err := a.partitionCounts(ctx, names)
		if err == nil || !kerr.IsRetriable(err) || wait > 2*time.Second {
			return counts, ids, err
		}
		select {
		case <-ctx.Done():
			return counts, ids, err
		case <-time.After(wait):
		}
	}
}

// metadataOf is a metadata request for the topics names, which a client
// sends as asked (not from its cache) and whose answer it caches.
func metadataOf(names []string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range names {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, t)
	}
	return req
}

func (a *Admin) partitionCounts(ctx context.Context, names []string) (map[string]int32, map[string][16]byte, error) {
	counts, ids := make(map[string]int32, len(names)), make(map[string][16]byte, len(names))
	if len(names) == 0 {
		return counts, ids, nil
	}
	resp, err := metadataOf(names).RequestWith(ctx, a.cl)
	if err != nil {
		return nil, nil, fmt.Errorf("broker: describing %d topics: %w", len(names), a.conn.Explain(err))
	}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case err == nil:
			counts[*t.Topic] = int32(len(t.Partitions))
			ids[*t.Topic] = t.TopicID
		case errors.Is(err, kerr.UnknownTopicOrPartition):
		default:
			return nil, nil, fmt.Errorf("broker: describing topic %q: %w", *t.Topic, err)
		}
	}
	return counts, ids, nil
}

// EnsureTopics creates those of specs that do not exist, in as few
// requests as it can: EnsureTopic for many topics at once. Existing
// topics are left as they are, but for the retention of those whose spec
// says RaiseRetention (one more request for them all, and one to raise
// those that are short). It returns the partition count of every topic,
// existing or created, so that a caller can check them. Topics are
// created with the Conn's Replication, as CreateTopic creates them, and it
// returns once every partition of those it created answers (awaitTopics).
func (a *Admin) EnsureTopics(ctx context.Context, specs []TopicSpec) (map[string]int32, error) {
	names := make([]string, 0, len(specs))
	var legacy []string
	owner := map[string][2]string{} // legacy changelog name -> group, queue
	for _, s := range specs {
		if p := TopicNameProblem(s.Name); p != "" {
			return nil, topicErr("topic %q: %s", s.Name, p)
		}
		if s.Partitions < 1 || s.Partitions > MaxPartitions {
			return nil, topicErr("topic %q: %d partitions: want 1 to %d", s.Name, s.Partitions, MaxPartitions)
		}
		for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
			if p := TopicConfigProblem(k, s.Configs[k]); p != "" {
				return nil, topicErr("topic %q: %s", s.Name, p)
			}
		}
		names = append(names, s.Name)
		if group, queue, ok := ParseChangelogTopic(s.Name); ok {
			if l := LegacyChangelogTopic(group, queue); len(l) <= MaxTopicLen {
				legacy = append(legacy, l)
				owner[l] = [2]string{group, queue}
			}
		}
	}
	if len(legacy) > 0 {
		found, err := a.PartitionCounts(ctx, legacy...)
		if err != nil {
			return nil, err
		}
		for _, l := range legacy {
			if _, ok := found[l]; ok {
				if err := a.checkLegacyChangelog(ctx, owner[l][0], owner[l][1]); err != nil {
					return nil, err
				}
			}
		}
	}
	counts, err := a.PartitionCounts(ctx, names...)
	if err != nil {
		return nil, err
	}
	// The missing ones, grouped by what they are created with.
	type shape struct {
		partitions int32
		configs    string
	}
	groups := map[shape][]TopicSpec{}
	for _, s := range specs {
		if _, ok := counts[s.Name]; ok {
			continue
		}
		k := shape{s.Partitions, configKey(s.Configs)}
		groups[k] = append(groups[k], s)
	}
	for _, g := range groups {
		configs := a.conn.Replication.createConfigs(g[0].Configs)
		if err := a.checkReplication(ctx, g[0].Name, len(g)-1, configs); err != nil {
			return nil, err
		}
		for i := 0; i < len(g); i += createBatch {
			part := g[i:min(i+createBatch, len(g))]
			names := make([]string, len(part))
			for j, s := range part {
				names[j] = s.Name
			}
			resps, err := a.adm.CreateTopics(ctx, part[0].Partitions, a.conn.Replication.factor(), ptrConfigs(configs), names...)
			if err != nil {
				return nil, fmt.Errorf("broker: creating %d topics: %w", len(names), a.conn.Explain(err))
			}
			for _, r := range resps {
				if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
					if r.ErrMessage != "" {
						return nil, fmt.Errorf("broker: creating topic %q: %w (%s)", r.Topic, r.Err, r.ErrMessage)
					}
					return nil, fmt.Errorf("broker: creating topic %q: %w", r.Topic, r.Err)
				}
			}
		}
	}
	if len(groups) > 0 {
		var created []string
		for _, g := range groups {
			for _, s := range g {
				created = append(created, s.Name)
			}
		}
		if err := a.awaitTopics(ctx, created); err != nil {
			return nil, err
		}
		// Topics another process created first keep their own counts.
		if counts, err = a.PartitionCounts(ctx, names...); err != nil {
			return nil, err
		}
	}
	if err := a.raiseRetention(ctx, specs); err != nil {
		return nil, err
	}
	return counts, nil
}

// topicsWait bounds how long awaitTopics waits for new topics to answer.
const topicsWait = 30 * time.Second

// awaitTopics waits until every partition of the topics just created has a
// leader that answers for it (ListOffsets). Kafka answers CreateTopics once
// its controller made them, and a broker may not know them for a moment
// after (no such topic in its metadata, or UNKNOWN_TOPIC_OR_PARTITION):
// a reader right after would take the topic for missing, or for one of
// no partitions. The embedded broker knows them at once.
func (a *Admin) awaitTopics(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, topicsWait)
	defer cancel()
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		problem := a.topicsAnswer(wctx, names)
		if problem == nil {
			return nil
		}
		select {
		case <-wctx.Done():
			if err := ctx.Err(); err != nil {
				return err // the caller's: it stopped waiting
			}
			return fmt.Errorf("broker: topics created, but they do not answer after %v: %w", topicsWait, problem)
		case <-time.After(wait):
		}
	}
}

// topicsAnswer returns nil when every partition of names has a leader that
// answers ListOffsets, else what does not.
func (a *Admin) topicsAnswer(ctx context.Context, names []string) error {
	// A metadata request of its own first: kgo keeps what an earlier one
	// said of these topics, before they existed, for MetadataMinAge (5 s),
	// and ListEndOffsets would take them for missing until then. A
	// request of the caller's own replaces what kgo keeps.
	resp, err := metadataOf(names).RequestWith(ctx, a.cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			name := "?"
			if t.Topic != nil {
				name = *t.Topic
			}
			return fmt.Errorf("topic %q: %w", name, err)
		}
	}
	ends, err := a.adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return err
	}
	for _, n := range names {
		ps, ok := ends[n]
		if !ok || len(ps) == 0 {
			return fmt.Errorf("topic %q: not in the brokers' metadata yet", n)
		}
		for p, o := range ps {
			if o.Err != nil {
				return fmt.Errorf("topic %q partition %d: %w", n, p, o.Err)
			}
		}
	}
	return nil
}

// configKey is a canonical text of configs, to group topics by them.
func configKey(configs map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(configs[k])
		b.WriteByte(0)
	}
	return b.String()
}

// StableOffsets returns the last stable offset of each of parts' partitions
// (what read_committed readers can see up to), in one ListOffsets request
// per broker, from the client's cached metadata: unlike kadm's listings it
// sends no metadata request first, which matters when it is asked every
// second about thousands of topics. A partition whose leader is moving
// (or any other retriable error) is asked again, up to stableRetries
// times over about a second; a partition the brokers still answer with an
// error is left out.
func (a *Admin) StableOffsets(ctx context.Context, parts map[string][]int32) (map[string]map[int32]int64, error) {
	out := make(map[string]map[int32]int64, len(parts))
	backoff := 50 * time.Millisecond
	for try := 0; ; try++ {
		again := a.stableOffsets(ctx, parts, out)
		if len(again) == 0 || try == stableRetries {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if ctx.Err() != nil {
			break
		}
		parts, backoff = again, 2*backoff
	}
	if len(out) == 0 && len(parts) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// shardMayPass says whether a broker's failure to answer may pass: a
// network error or a retriable Kafka error may, an error of
// authorization, a closed client or the caller's end may not.
func shardMayPass(ctx context.Context, err error) bool {
	var ke *kerr.Error
	switch {
	case ctx.Err() != nil, errors.Is(err, kgo.ErrClientClosed):
		return false
	case errors.As(err, &ke):
		return ke.Retriable
	}
	return true
}

// stableRetries is how many times StableOffsets asks again for partitions
// answered with a retriable error: after 50, 100, 200 and 400 ms.
const stableRetries = 4

// stableOffsets asks once for parts' last stable offsets, adds the answers
// to out, and returns the partitions to ask again: those of a broker that
// did not answer, or answered with a retriable error (a leader that moved,
// an offset not yet available on a new leader).
func (a *Admin) stableOffsets(ctx context.Context, parts map[string][]int32, out map[string]map[int32]int64) (again map[string][]int32) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = 1
	for t, ps := range parts {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t
		for _, p := range ps {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.CurrentLeaderEpoch = -1
			rp.Timestamp = -1 // the end
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	answered := make(map[string]map[int32]bool, len(parts))
	retry := map[string]bool{} // topics with a partition to ask again
	for _, shard := range a.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			// The partitions of an unreachable broker: asked again if
			// the failure may pass.
			if shardMayPass(ctx, shard.Err) {
				if r, ok := shard.Req.(*kmsg.ListOffsetsRequest); ok {
					for _, t := range r.Topics {
						retry[t.Topic] = true
					}
				}
			}
			continue
		}
		resp := shard.Resp.(*kmsg.ListOffsetsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					if kerr.IsRetriable(kerr.ErrorForCode(p.ErrorCode)) {
						retry[t.Topic] = true
					}
					continue
				}
				if out[t.Topic] == nil {
					out[t.Topic] = map[int32]int64{}
				}
				out[t.Topic][p.Partition] = p.Offset
				if answered[t.Topic] == nil {
					answered[t.Topic] = map[int32]bool{}
				}
				answered[t.Topic][p.Partition] = true
			}
		}
	}
	for t := range retry {
		for _, p := range parts[t] {
			if !answered[t][p] {
				if again == nil {
					again = map[string][]int32{}
				}
				again[t] = append(again[t], p)
			}
		}
	}
	return again
}

// CommittedOffsets returns the offsets that each of groups committed on
// parts' partitions, by group, topic and partition, in one OffsetFetch
// request per coordinator however many groups and topics: unlike kadm's
// fetches, it asks for these partitions only, not for everything a group
// committed (a worker's group commits on thousands of queues). A
// partition without a commit is absent; so is a group that does not
// exist.
func (a *Admin) CommittedOffsets(ctx context.Context, groups []string, parts map[string][]int32) (map[string]map[string]map[int32]int64, error) {
	out := make(map[string]map[string]map[int32]int64, len(groups))
	if len(groups) == 0 || len(parts) == 0 {
		return out, nil
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	for _, g := range groups {
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group = g
		for t, ps := range parts {
			rt := kmsg.NewOffsetFetchRequestGroupTopic()
			rt.Topic, rt.Partitions = t, ps
			rg.Topics = append(rg.Topics, rt)
		}
		req.Groups = append(req.Groups, rg)
	}
	add := func(group string, topics []kmsg.OffsetFetchResponseGroupTopic) {
		for _, t := range topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 || p.Offset < 0 {
					continue
				}
				if out[group] == nil {
					out[group] = map[string]map[int32]int64{}
				}
				if out[group][t.Topic] == nil {
					out[group][t.Topic] = map[int32]int64{}
				}
				out[group][t.Topic][p.Partition] = p.Offset
			}
		}
	}
	for _, shard := range a.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			return nil, fmt.Errorf("broker: fetching the offsets of %d groups: %w", len(groups), a.conn.Explain(shard.Err))
		}
		resp := shard.Resp.(*kmsg.OffsetFetchResponse)
		for _, g := range resp.Groups {
			switch err := kerr.ErrorForCode(g.ErrorCode); {
			case errors.Is(err, kerr.GroupIDNotFound):
				continue
			case err != nil:
				return nil, fmt.Errorf("broker: fetching the offsets of group %q: %w", g.Group, err)
			}
			add(g.Group, g.Topics)
		}
	}
	return out, nil
}
