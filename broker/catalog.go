package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The catalogue of onceq's own topics. Each kind's name, partitions and
// configs are decided here, once; every process that creates one of them
// asks here for its TopicSpec and ensures it with Admin.EnsureTopics, so
// whichever process comes first creates it as any other would have:
//
//	kind             name                                  partitions          configs                          created by
//	KindBuckets      onceq-delay-<bucket>                  BucketPartitions    append time                      the delay service, SetLadder, whoever routes a task to it
//	KindDeadLetters  onceq-dlq-<queue or bucket topic>     1                   -                                workers, the delay service
//	KindRecords      onceq-rec-<queue>                     the queue's         delete, retention (RecordsSpec)  workers, producers
//	KindChangelog    onceq-checkpoint-<n>-<group>-<queue>  the queue's         compact                          exactly-once workers
//	KindWake         onceq-wake                            1                   delete, an hour                  workers, the delay service, producers
//	KindWorkflow     onceq-workflow                        WorkflowPartitions  -                                the workflow service, whoever writes a task to it
//	KindControl      onceq-control                         1                   compact                          workers, cancels and pauses
//	KindLadder       onceq-ladder                          1                   compact                          SetLadder
//	KindPeriodic     onceq-periodic                        1                   compact                          the periodic store
//	KindTokens       onceq-tokens                          1                   compact                          the token store
//	KindLeases       onceq-leases-<group>                  1                   compact,delete, 2 leases' keep   onceq serve's pull group (LeasesSpec)
//	KindLimits       onceq-limits                          1                   compact, append time             workers, limits set (LimitsSpec)
//	KindDLQFloors    onceq-letter-floors                   1                   compact                          removals of lane queues' dead letters
//
// A records topic is the one kind whose creators need different configs:
// a producer needs its pending records kept DefaultRecordsRetention, a
// worker its result retention or dedup window, whichever is longer. Its
// spec asks EnsureTopics to raise the retention of an existing topic that
// keeps records for less than its creator needs (RaiseRetention), so the
// topic keeps them for the longest any of its writers needs, whoever
// created it.

// Kind is a kind of onceq's own topics.
type Kind uint8

// The kinds of onceq's topics; KindNotOwn is any other topic.
const (
	KindNotOwn Kind = iota
	KindBuckets
	KindDeadLetters
	KindRecords
	KindChangelog
	KindWake
	KindWorkflow
	KindControl
	KindLadder
	KindPeriodic
	KindTokens
	KindLeases
	KindLimits
	KindDLQFloors
)

var kindNames = [...]string{"not onceq's", "delay bucket", "dead letters", "task records", "checkpoint changelog",
	"wake-ups", "workflow queue", "control", "delay ladder", "periodic schedules", "tokens", "leases", "limits", "dead-letter floors"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind " + strconv.Itoa(int(k))
}

// The names of onceq's topics of one kind each. WakeTopic is another.
const (
	// ControlTopic holds cancels and pauses (package internal/ctltopic).
	ControlTopic = "onceq-control"
	// LadderTopic holds the cluster's delay ladder (delay.SetLadder).
	LadderTopic = "onceq-ladder"
	// PeriodicTopic holds the periodic schedules (package periodic).
	PeriodicTopic = "onceq-periodic"
	// TokensTopic holds the tokens of onceq serve (package auth).
	TokensTopic = "onceq-tokens"
	// LimitsTopic holds the limits of queues and the claims of the
	// tasks they hold (package internal/limit).
	LimitsTopic = "onceq-limits"
	// DLQFloorsTopic holds, for each lane queue some of whose dead
	// letters were removed, the offsets of its lane's dead-letter topic
	// below which they are gone (package dlq).
	DLQFloorsTopic = "onceq-letter-floors"
)

// BucketPartitions is the partition count of a delay bucket topic onceq
// creates. Several delay service instances share a bucket's partitions.
const BucketPartitions = 8

// WorkflowPartitions is how many partitions the workflow service's queue
// (onceq.WorkflowQueue) has when onceq creates it: the service's workers
// share them.
const WorkflowPartitions = 8

// DefaultRecordsRetention is how long a records topic keeps its records
// when its creator names no retention: the workers' default dedup window
// and result retention, 7 days.
const DefaultRecordsRetention = 7 * 24 * time.Hour

// KindOf says which kind of onceq's topics topic is, by its name.
func KindOf(topic string) Kind {
	switch topic {
	case WakeTopic:
		return KindWake
	case workflowQueue:
		return KindWorkflow
	case ControlTopic:
		return KindControl
	case LadderTopic:
		return KindLadder
	case PeriodicTopic:
		return KindPeriodic
	case TokensTopic:
		return KindTokens
	case LimitsTopic:
		return KindLimits
	case DLQFloorsTopic:
		return KindDLQFloors
	}
	for _, p := range []struct {
		prefix string
		kind   Kind
	}{{DelayPrefix, KindBuckets}, {DLQPrefix, KindDeadLetters}, {RecordsPrefix, KindRecords}, {ChangelogPrefix, KindChangelog}, {LeasesPrefix, KindLeases}} {
		if len(topic) > len(p.prefix) && strings.HasPrefix(topic, p.prefix) {
			return p.kind
		}
	}
	return KindNotOwn
}

// TopicSpecOf returns the spec of one of onceq's topics whose spec follows
// from its name alone: a bucket, dead-letter, wake-up, workflow or table
// topic. A records topic or a changelog takes its queue's partitions
// (RecordsSpec, ChangelogSpec), a lease topic its server's lease keep
// (LeasesSpec), and a user's queue is not onceq's: ok is false for them.
func TopicSpecOf(topic string) (spec TopicSpec, ok bool) {
	switch KindOf(topic) {
	case KindBuckets:
		return BucketSpec(topic), true
	case KindDeadLetters:
		return DeadLettersSpec(topic), true
	case KindWake:
		return WakeSpec(), true
	case KindWorkflow:
		return WorkflowSpec(), true
	case KindControl, KindLadder, KindPeriodic, KindTokens, KindDLQFloors:
		return TableSpec(topic), true
	case KindLimits:
		return LimitsSpec(), true
	}
	return TopicSpec{}, false
}

// BucketSpec is the spec of a delay bucket topic (DelayTopic):
// BucketPartitions partitions, and the broker stamps each record with its
// append time, so that producers' clock skew cannot reorder a bucket
// partition.
func BucketSpec(topic string) TopicSpec {
	return TopicSpec{Name: topic, Partitions: BucketPartitions, Configs: map[string]string{"message.timestamp.type": "LogAppendTime"}}
}

// DeadLettersSpec is the spec of a dead-letter topic (DLQTopic of a queue,
// or of a bucket topic for a record whose queue is unknown): one
// partition, and the brokers' configs.
func DeadLettersSpec(topic string) TopicSpec { return TopicSpec{Name: topic, Partitions: 1} }

// RecordsSpec is the spec of queue's task records topic (RecordsTopic),
// of the queue's partitions: records are deleted past retention (0:
// DefaultRecordsRetention), which is how long finished tasks are known.
// The topic is not compacted: a worker's records are batches keyed by
// queue partition, and compaction would keep only the last of each.
//
// retention is what the topic's creator needs, and an existing topic that
// keeps records for less is raised to it (RaiseRetention), never lowered:
// the topic keeps records for the longest any of its writers needs,
// whichever created it. Writers that start at once with different needs
// may race (Kafka has no compare-and-set of configs); each raises the
// topic again at its next start.
func RecordsSpec(queue string, partitions int32, retention time.Duration) TopicSpec {
	if retention <= 0 {
		retention = DefaultRecordsRetention
	}
	return TopicSpec{Name: RecordsTopic(queue), Partitions: partitions, RaiseRetention: true,
		Configs: map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(retention.Milliseconds(), 10)}}
}

// ChangelogSpec is the spec of the checkpoint changelog of group's
// consumption of queue (ChangelogTopic): one partition for each of the
// queue's, compacted: what a later record replaces, or a tombstone
// expires, is dropped.
func ChangelogSpec(group, queue string, partitions int32) TopicSpec {
	return TopicSpec{Name: ChangelogTopic(group, queue), Partitions: partitions, Configs: map[string]string{"cleanup.policy": "compact"}}
}

// WakeSpec is the spec of WakeTopic: one partition, and wake-ups are worth
// nothing after a moment, so the topic keeps an hour of them in segments
// of ten minutes.
func WakeSpec() TopicSpec {
	return TopicSpec{Name: WakeTopic, Partitions: 1, Configs: map[string]string{
		"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(time.Hour.Milliseconds(), 10),
		"segment.ms": strconv.FormatInt((10 * time.Minute).Milliseconds(), 10)}}
}

// WorkflowSpec is the spec of the workflow service's queue
// (onceq.WorkflowQueue): WorkflowPartitions partitions, a queue's
// configs.
func WorkflowSpec() TopicSpec { return TopicSpec{Name: workflowQueue, Partitions: WorkflowPartitions} }

// TableSpec is the spec of a topic read as a table (package
// internal/table: ControlTopic, LadderTopic, PeriodicTopic, TokensTopic):
// one partition, compacted, so that it keeps the latest record of each
// key.
func TableSpec(topic string) TopicSpec {
	return TopicSpec{Name: topic, Partitions: 1, Configs: map[string]string{"cleanup.policy": "compact"}}
}

// LeasesPrefix starts the lease topic of each pull group of onceq serve.
const LeasesPrefix = "onceq-leases-"

// LeasesTopic is the lease topic of onceq serve's pull group group.
func LeasesTopic(group string) string { return LeasesPrefix + group }

// LeasesSpec is the spec of the lease topic of pull group group: a table
// (one partition) whose records are compacted by job and also deleted
// after twice keep, how long a server keeps an ended lease, so that the
// leases of jobs long done do not pile up.
func LeasesSpec(group string, keep time.Duration) TopicSpec {
	spec := TableSpec(LeasesTopic(group))
	spec.Configs["cleanup.policy"] = "compact,delete"
	spec.Configs["retention.ms"] = strconv.FormatInt(int64(2*keep/time.Millisecond), 10)
	return spec
}

// LimitsSpec is the spec of the limits topic: a table whose records
// carry the broker's append time, one clock for every reader (package
// internal/limit).
func LimitsSpec() TopicSpec {
	spec := TableSpec(LimitsTopic)
	spec.Configs["message.timestamp.type"] = "LogAppendTime"
	return spec
}

// raiseRetention raises the retention.ms of the existing topics among
// specs that RaiseRetention to the spec's, where it is shorter. A topic
// the brokers do not know yet (this call just made it, with the spec's
// retention) is left alone.
func (a *Admin) raiseRetention(ctx context.Context, specs []TopicSpec) error {
	want := map[string]int64{}
	for _, s := range specs {
		if !s.RaiseRetention {
			continue
		}
		ms, err := strconv.ParseInt(s.Configs["retention.ms"], 10, 64)
		if err != nil {
			return topicErr("topic %q: raising its retention takes a retention.ms in its configs", s.Name)
		}
		if w, ok := want[s.Name]; !ok || longer(ms, w) {
			want[s.Name] = ms
		}
	}
	if len(want) == 0 {
		return nil
	}
	have, err := a.retentions(ctx, slices.Sorted(maps.Keys(want)))
	if err != nil {
		return err
	}
	short := map[int64][]string{} // the wanted retention -> topics shorter than it
	for name, w := range want {
		if h, ok := have[name]; ok && longer(w, h) {
			short[w] = append(short[w], name)
		}
	}
	for w, names := range short {
		slices.Sort(names)
		v := strconv.FormatInt(w, 10)
		resps, err := a.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &v}}, names...)
		if err == nil {
			for _, r := range resps {
				if r.Err != nil {
					err = fmt.Errorf("%s: %w", r.Name, r.Err)
					if r.ErrMessage != "" {
						err = fmt.Errorf("%s: %w (%s)", r.Name, r.Err, r.ErrMessage)
					}
					break
				}
			}
		}
		if err != nil {
			return fmt.Errorf("broker: raising the retention of %d topics to retention.ms=%s, which their writer needs "+
				"(set it with the brokers' tools, or let this client alter topic configs): %w", len(names), v, a.conn.Explain(err))
		}
	}
	return nil
}

// longer says whether retention a (retention.ms, -1 for ever) keeps
// records longer than b.
func longer(a, b int64) bool {
	switch {
	case a < 0:
		return b >= 0
	case b < 0:
		return false
	}
	return a > b
}

// retentions returns the retention.ms of each of topics that the brokers
// know, in one DescribeConfigs request.
func (a *Admin) retentions(ctx context.Context, topics []string) (map[string]int64, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range topics {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType = kmsg.ConfigResourceTypeTopic
		rr.ResourceName = t
		rr.ConfigNames = []string{"retention.ms"}
		req.Resources = append(req.Resources, rr)
	}
	out := make(map[string]int64, len(topics))
	for _, shard := range a.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			return nil, fmt.Errorf("broker: describing the configs of %d topics: %w", len(topics), a.conn.Explain(shard.Err))
		}
		for _, r := range shard.Resp.(*kmsg.DescribeConfigsResponse).Resources {
			switch err := kerr.ErrorForCode(r.ErrorCode); {
			case errors.Is(err, kerr.UnknownTopicOrPartition):
				continue
			case err != nil:
				return nil, fmt.Errorf("broker: describing the configs of topic %q: %w", r.ResourceName, err)
			}
			for _, c := range r.Configs {
				if c.Name != "retention.ms" || c.Value == nil {
					continue
				}
				if ms, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
					out[r.ResourceName] = ms
				}
			}
		}
	}
	return out, nil
}
