package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrTopicNotFound is returned for operations on a topic that does not exist.
var ErrTopicNotFound = errors.New("topic not found")

// ErrLegacyChangelog is returned for a group's changelog that still has the
// ambiguous name earlier onceq versions gave it (LegacyChangelogTopic).
var ErrLegacyChangelog = errors.New("changelog under its old, ambiguous name")

// Admin manages topics and reads consumer-group lag.
type Admin struct {
	conn Conn
	cl   *kgo.Client
	adm  *kadm.Client
	repl clusterReplication // what checkReplication learned
}

// NewAdmin connects an admin client. Close releases it. extra adds to the
// client's options (a longer kgo.MetadataMinAge, for example).
func NewAdmin(c Conn, extra ...kgo.Opt) (*Admin, error) {
	cl, err := c.NewClient(append([]kgo.Opt{kgo.RetryBackoffFn(adminBackoff)}, extra...)...)
	if err != nil {
		return nil, err
	}
	return &Admin{conn: c, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// adminBackoff is how long an admin request waits before it tries again
// after a retriable error: 10 ms, doubling to at most a second, jittered.
// kgo's default starts at 250 ms, made for a producer's back-pressure; an
// admin request's usual retriable error is a topic just created that its
// leader does not answer for yet (Kafka, for some tens of milliseconds),
// and a new queue's first task waited out that 250 ms twice: once in its
// publish, once in the worker's restore of its partition.
func adminBackoff(fails int) time.Duration {
	d := time.Second
	if fails < 8 {
		d = 10 * time.Millisecond << max(fails-1, 0)
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Close releases the connection.
func (a *Admin) Close() { a.cl.Close() }

// Kadm returns the underlying kadm client for what Admin does not cover.
func (a *Admin) Kadm() *kadm.Client { return a.adm }

// Forget drops what the admin's client knows of topics' metadata, a
// topic's absence included (kgo keeps it up to a second): the next
// request about them asks the brokers. Call it when a topic that was
// missing may have been created since.
func (a *Admin) Forget(topics ...string) { a.cl.PurgeTopicsFromClient(topics...) }

// TopicInfo describes a topic.
type TopicInfo struct {
	Name       string            `json:"name"`
	Partitions []PartitionInfo   `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

// PartitionInfo describes a partition: its leader, its first offset, its
// high watermark (End) and its last stable offset (Stable: what
// read_committed readers can see).
type PartitionInfo struct {
	Partition int32 `json:"partition"`
	Leader    int32 `json:"leader"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
	Stable    int64 `json:"stable"`
}

// Records is the number of offsets between Start and End.
func (t TopicInfo) Records() int64 {
	var n int64
	for _, p := range t.Partitions {
		n += p.End - p.Start
	}
	return n
}

// CreateTopic creates a topic, failing if it exists. configs may be nil.
// The name, the partition count (1 to MaxPartitions) and the configs
// (ValidateTopicConfigs) are checked before anything is sent: bad ones
// wrap ErrConfig. The topic is replicated as the Conn's Replication says,
// and one replica on a cluster of several brokers is refused with
// ErrSingleReplica unless it allows it. A refusal by the brokers wraps their error code
// (kerr.InvalidPartitions, kerr.InvalidConfig, ...) and carries their
// message. It returns once every partition of the topic answers (see
// awaitTopics).
func (a *Admin) CreateTopic(ctx context.Context, name string, partitions int32, configs map[string]string) error {
	if p := TopicNameProblem(name); p != "" {
		return topicErr("topic %q: %s", name, p)
	}
	if partitions < 1 || partitions > MaxPartitions {
		return topicErr("topic %q: %d partitions: want 1 to %d", name, partitions, MaxPartitions)
	}
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		if p := TopicConfigProblem(k, configs[k]); p != "" {
			return topicErr("topic %q: %s", name, p)
		}
	}
	configs = a.conn.Replication.createConfigs(configs)
	if err := a.checkReplication(ctx, name, 0, configs); err != nil {
		return err
	}
	resp, err := a.adm.CreateTopic(ctx, partitions, a.conn.Replication.factor(), ptrConfigs(configs), name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		if resp.ErrMessage != "" {
			return fmt.Errorf("broker: creating topic %q: %w (%s)", name, err, resp.ErrMessage)
		}
		return fmt.Errorf("broker: creating topic %q: %w", name, a.conn.Explain(err))
	}
	return a.awaitTopics(ctx, []string{name})
}

// EnsureTopic creates a topic unless it exists. An existing topic is left
// as it is, whatever its partitions and configs.
//
// For a changelog (a name ChangelogTopic made) it first looks for the
// group's changelog under the name earlier onceq versions gave it
// (LegacyChangelogTopic), and refuses with ErrLegacyChangelog if it exists:
// that topic may hold another group's records, and a worker that started
// on a new, empty changelog would forget what the old one recorded. The
// error says how to move on.
func (a *Admin) EnsureTopic(ctx context.Context, name string, partitions int32, configs map[string]string) error {
	if group, queue, ok := ParseChangelogTopic(name); ok {
		if err := a.checkLegacyChangelog(ctx, group, queue); err != nil {
			return err
		}
	}
	err := a.CreateTopic(ctx, name, partitions, configs)
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil
	}
	return err
}

// checkLegacyChangelog refuses a group and queue whose changelog still has
// its legacy name.
func (a *Admin) checkLegacyChangelog(ctx context.Context, group, queue string) error {
	legacy := LegacyChangelogTopic(group, queue)
	if len(legacy) > MaxTopicLen {
		return nil // no broker could have made it
	}
	details, err := a.adm.ListTopicsWithInternal(ctx, legacy)
	if err != nil {
		return fmt.Errorf("broker: looking for the old changelog %s: %w", legacy, a.conn.Explain(err))
	}
	if d, ok := details[legacy]; !ok || d.Err != nil {
		return nil
	}
	return fmt.Errorf("broker: group %q, queue %q: its changelog is %s, the name onceq gave changelogs before it named them %s; "+
		"that name is ambiguous (%s), so the topic may hold other groups' records. "+
		"Stop every worker of the groups that share it and delete it ('onceq topics delete %s --internal'); the workers then start %s. "+
		"They keep their committed offsets, so no task runs again, but the processed IDs and task state the old changelog held are dropped: "+
		"a later duplicate of a task that already ran runs again, and State starts empty: %w",
		group, queue, legacy, ChangelogPrefix+"<group length>-<group>-<queue>", ownersText(legacy, group, queue),
		legacy, ChangelogTopic(group, queue), ErrLegacyChangelog)
}

// ownersText lists the other groups and queues a legacy changelog name
// stands for.
func ownersText(legacy, group, queue string) string {
	var others []string
	for _, o := range LegacyChangelogOwners(legacy) {
		if o.Group != group || o.Queue != queue {
			others = append(others, fmt.Sprintf("group %q with queue %q", o.Group, o.Queue))
		}
	}
	if len(others) == 0 {
		return "any group and queue whose names join with '-' to the same string share it"
	}
	return strings.Join(others, ", ") + " share it"
}

// ListTopics returns topic names, sorted. Internal topics (onceq's own and
// Kafka's) are included only when internal is true.
func (a *Admin) ListTopics(ctx context.Context, internal bool) ([]string, error) {
	// A metadata request of its own: kadm's listing is kept for up to
	// MetadataMinAge, and would miss a topic created moments ago.
	req := kmsg.NewPtrMetadataRequest()
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, fmt.Errorf("broker: listing topics: %w", a.conn.Explain(err))
	}
	var names []string
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		if n := *t.Topic; internal || !IsInternal(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

// DescribeTopic returns a topic's partitions with their offsets, and its
// configs that differ from the defaults. Every partition's offsets are
// known: a partition the broker cannot answer for yet (a topic just made,
// a leader moving) is asked again for a few seconds, and then is an error,
// never a partition silently reported empty.
func (a *Admin) DescribeTopic(ctx context.Context, name string) (TopicInfo, error) {
	var (
		info TopicInfo
		err  error
	)
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		info, err = a.describeTopic(ctx, name)
		if err == nil || !kerr.IsRetriable(err) || wait > 2*time.Second {
			return info, err
		}
		select {
		case <-ctx.Done():
			return info, err
		case <-time.After(wait):
		}
	}
}

func (a *Admin) describeTopic(ctx context.Context, name string) (TopicInfo, error) {
	details, err := a.adm.ListTopicsWithInternal(ctx, name)
	if err != nil {
		return TopicInfo{}, fmt.Errorf("broker: describing topic %q: %w", name, a.conn.Explain(err))
	}
	d, ok := details[name]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return TopicInfo{}, fmt.Errorf("broker: topic %q: %w", name, ErrTopicNotFound)
	}
	if d.Err != nil {
		return TopicInfo{}, fmt.Errorf("broker: describing topic %q: %w", name, d.Err)
	}
	starts, err := a.adm.ListStartOffsets(ctx, name)
	if err != nil {
		return TopicInfo{}, fmt.Errorf("broker: listing start offsets of %q: %w", name, err)
	}
	ends, err := a.adm.ListEndOffsets(ctx, name)
	if err != nil {
		return TopicInfo{}, fmt.Errorf("broker: listing end offsets of %q: %w", name, err)
	}
	stables, err := a.adm.ListCommittedOffsets(ctx, name)
	if err != nil {
		return TopicInfo{}, fmt.Errorf("broker: listing stable offsets of %q: %w", name, err)
	}
	info := TopicInfo{Name: name}
	for _, p := range d.Partitions.Numbers() {
		pi := PartitionInfo{Partition: p, Leader: d.Partitions[p].Leader}
		for _, l := range []struct {
			what   string
			listed kadm.ListedOffsets
			to     *int64
		}{{"start", starts, &pi.Start}, {"end", ends, &pi.End}, {"stable", stables, &pi.Stable}} {
			o, ok := l.listed.Lookup(name, p)
			if !ok {
				// Metadata that has the partition and a listing that lacks
				// it: the listing saw an older view of the topic.
				return TopicInfo{}, fmt.Errorf("broker: listing %s offset of %s partition %d: %w", l.what, name, p, kerr.UnknownTopicOrPartition)
			}
			if o.Err != nil {
				return TopicInfo{}, fmt.Errorf("broker: listing %s offset of %s partition %d: %w", l.what, name, p, o.Err)
			}
			*l.to = o.Offset
		}
		info.Partitions = append(info.Partitions, pi)
	}
	if rcs, err := a.adm.DescribeTopicConfigs(ctx, name); err == nil && len(rcs) == 1 && rcs[0].Err == nil {
		for _, c := range rcs[0].Configs {
			if c.Source == 1 && c.Value != nil { // DYNAMIC_TOPIC_CONFIG: set on this topic
				if info.Configs == nil {
					info.Configs = map[string]string{}
				}
				info.Configs[c.Key] = *c.Value
			}
		}
	}
	return info, nil
}

// DeleteTopic deletes a topic.
func (a *Admin) DeleteTopic(ctx context.Context, name string) error {
	resp, err := a.adm.DeleteTopic(ctx, name)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("broker: topic %q: %w", name, ErrTopicNotFound)
	}
	if err != nil {
		return fmt.Errorf("broker: deleting topic %q: %w", name, a.conn.Explain(err))
	}
	return nil
}

// PartitionLag is a group's progress on one partition.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"` // -1: nothing committed
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
}

// GroupLag returns a group's committed offsets and lag per partition,
// sorted by topic and partition.
func (a *Admin) GroupLag(ctx context.Context, group string) ([]PartitionLag, error) {
	lags, err := a.adm.Lag(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("broker: lag of group %q: %w", group, a.conn.Explain(err))
	}
	gl, ok := lags[group]
	if !ok {
		return nil, fmt.Errorf("broker: group %q not found", group)
	}
	if gl.FetchErr != nil {
		return nil, fmt.Errorf("broker: committed offsets of group %q: %w", group, gl.FetchErr)
	}
	var out []PartitionLag
	for _, l := range gl.Lag.Sorted() {
		out = append(out, PartitionLag{Topic: l.Topic, Partition: l.Partition, Committed: l.Commit.At, End: l.End.Offset, Lag: l.Lag})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

func ptrConfigs(m map[string]string) map[string]*string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = &v
	}
	return out
}

// ParseConfigs reads "key=value" pairs into a config map and checks them
// with ValidateTopicConfigs. A key given twice is refused.
func ParseConfigs(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, topicErr("topic config %q: want key=value, for example retention.ms=86400000", p)
		}
		if prev, dup := out[k]; dup {
			return nil, topicErr("topic config %s is given twice (%q and %q): give it once", k, prev, v)
		}
		out[k] = v
	}
	if err := ValidateTopicConfigs(out); err != nil {
		return nil, err
	}
	return out, nil
}

// GroupMembers counts the members of a classic consumer group now: 0 for
// a group that has none, or does not exist.
func (a *Admin) GroupMembers(ctx context.Context, group string) (int, error) {
	g, err := a.describeGroup(ctx, group)
	return len(g.Members), err
}

// describeGroup describes a classic consumer group now: one without
// members for a group that does not exist.
func (a *Admin) describeGroup(ctx context.Context, group string) (kadm.DescribedGroup, error) {
	gs, err := a.adm.DescribeGroups(ctx, group)
	if err != nil {
		return kadm.DescribedGroup{}, fmt.Errorf("broker: describing group %q: %w", group, a.conn.Explain(err))
	}
	g := gs[group]
	if errors.Is(g.Err, kerr.GroupIDNotFound) {
		return kadm.DescribedGroup{}, nil
	}
	if g.Err != nil {
		return kadm.DescribedGroup{}, fmt.Errorf("broker: describing group %q: %w", group, g.Err)
	}
	return g, nil
}
