package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// Drift is how one partition of a store compares with Kafka: the group's
// committed offset and the partition's changelog. Offsets of -1 are
// missing.
type Drift struct {
	TP TP `json:"-"`
	// Topic and Partition are TP's, for JSON.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Source is the store's source offset; Committed the group's.
	Source    int64 `json:"source"`
	Committed int64 `json:"committed"`
	// Changelog is the changelog topic the store was compared with: the
	// group's (broker.ChangelogTopic), or the one of its old name while
	// that exists and the new one does not.
	Changelog string `json:"changelog"`
	// ChangelogOffset is the store's next changelog offset; ChangelogEnd
	// the changelog partition's last stable offset (-1: it does not
	// exist). Unapplied counts the changelog records in between, which
	// the worker replays when it starts.
	ChangelogOffset int64 `json:"changelog_offset"`
	ChangelogEnd    int64 `json:"changelog_end"`
	Unapplied       int64 `json:"unapplied"`
	// Problems says what is wrong, one sentence each; none when in sync.
	Problems []string `json:"problems,omitempty"`
}

// InSync reports a partition without problems.
func (d Drift) InSync() bool { return len(d.Problems) == 0 }

// Verify compares every partition of s, the store of a worker of group,
// with Kafka, and says what drifts:
//
//   - the store's source offset is ahead of or behind the group's commit;
//   - the changelog holds records after the store's changelog offset (a
//     worker replays them when it starts: drift, not damage);
//   - the changelog ends before the store's changelog offset, or does not
//     exist: it was deleted or recreated, so a partition that moves to
//     another worker is restored without the processed IDs and state the
//     store holds, and the worker itself drops them when it next restores
//     the partition;
//   - the group's changelog still has its old, ambiguous name
//     (broker.LegacyChangelogTopic), and another group that shares that
//     name (its queue exists and it committed offsets on it) wrote its
//     records there too.
//
// The store is only read. The error is for what could not be read.
func Verify(ctx context.Context, s *Store, conn broker.Conn, group string) ([]Drift, error) {
	tps, err := s.Partitions()
	if err != nil {
		return nil, err
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	committed, err := adm.Kadm().FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // nothing committed
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: committed offsets of group %q: %w", group, err)
	}
	v := verifier{ctx: ctx, adm: adm, conn: conn, group: group, changelogs: map[string]*changelogInfo{}}
	var out []Drift
	for _, tp := range tps {
		d := Drift{TP: tp, Topic: tp.Topic, Partition: tp.Partition, Source: -1, Committed: -1, ChangelogOffset: -1, ChangelogEnd: -1}
		if o, ok, err := s.Checkpoint(tp); err != nil {
			return nil, err
		} else if ok {
			d.Source, d.ChangelogOffset = o.Source, o.Changelog
		}
		if c, ok := committed.Lookup(tp.Topic, tp.Partition); ok {
			if c.Err != nil {
				return nil, fmt.Errorf("checkpoint: committed offset of %s: %w", tp, c.Err)
			}
			d.Committed = c.At
		}
		switch {
		case d.Source > d.Committed:
			d.Problems = append(d.Problems, "the store is ahead of the group's commit: the store belongs elsewhere, or the group's offsets were reset")
		case d.Source != d.Committed:
			d.Problems = append(d.Problems, "the store is behind the group's commit")
		}
		cl, err := v.changelog(tp.Topic)
		if err != nil {
			return nil, err
		}
		d.Changelog = cl.topic
		d.Problems = append(d.Problems, cl.problems...)
		if cl.ends != nil {
			end, ok := cl.ends[tp.Partition]
			if ok {
				d.ChangelogEnd = end
			}
		}
		switch {
		case d.ChangelogEnd < 0 && cl.ends != nil:
			d.Problems = append(d.Problems, fmt.Sprintf("the changelog %s has no partition %d", cl.topic, tp.Partition))
		case d.ChangelogEnd < 0:
			if d.ChangelogOffset > 0 {
				d.Problems = append(d.Problems, fmt.Sprintf("the changelog %s does not exist (deleted?): the processed IDs and state the store holds "+
					"are in no changelog, so a partition that moves to another worker runs without them", cl.topic))
			}
		case d.ChangelogOffset > d.ChangelogEnd:
			d.Problems = append(d.Problems, fmt.Sprintf("the changelog is behind the store: it ends at %d, before the store's offset %d, "+
				"so it was deleted or recreated and lost what the store holds: a worker drops the partition's processed IDs and state "+
				"when it next restores it, and a partition that moves runs without them", d.ChangelogEnd, d.ChangelogOffset))
		default:
			if d.Unapplied, err = countDataRecords(ctx, conn, cl.topic, tp.Partition, max(d.ChangelogOffset, 0), d.ChangelogEnd); err != nil {
				return nil, err
			}
			if d.Unapplied > 0 {
				d.Problems = append(d.Problems, "changelog records not in the store (a worker replays them when it starts)")
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// verifier caches what Verify learns of each queue's changelog.
type verifier struct {
	ctx        context.Context
	adm        *broker.Admin
	conn       broker.Conn
	group      string
	changelogs map[string]*changelogInfo // by queue
}

// changelogInfo is a queue's changelog: its topic, the last stable offset
// of each partition (nil: the topic does not exist), and its problems.
type changelogInfo struct {
	topic    string
	ends     map[int32]int64
	problems []string
}

func (v *verifier) changelog(queue string) (*changelogInfo, error) {
	if cl, ok := v.changelogs[queue]; ok {
		return cl, nil
	}
	cl := &changelogInfo{topic: broker.ChangelogTopic(v.group, queue)}
	ends, err := v.ends(cl.topic)
	if err != nil {
		return nil, err
	}
	legacy := broker.LegacyChangelogTopic(v.group, queue)
	var legacyEnds map[int32]int64
	if len(legacy) <= broker.MaxTopicLen {
		if legacyEnds, err = v.ends(legacy); err != nil {
			return nil, err
		}
	}
	if legacyEnds != nil {
		if ends == nil { // the store's offsets are the old topic's
			cl.topic, ends = legacy, legacyEnds
		}
		others, err := v.sharers(legacy, queue)
		if err != nil {
			return nil, err
		}
		if len(others) > 0 {
			cl.problems = append(cl.problems, fmt.Sprintf("the changelog %s holds another group's records: %s wrote to it too "+
				"(onceq named changelogs onceq-changelog-<group>-<queue> before, and these names join to the same topic)",
				legacy, strings.Join(others, " and ")))
		} else {
			cl.problems = append(cl.problems, fmt.Sprintf("the changelog still has its old, ambiguous name %s: workers refuse to start until it is deleted "+
				"('onceq topics delete %s --internal'; see the README on changelogs)", legacy, legacy))
		}
	}
	cl.ends = ends
	v.changelogs[queue] = cl
	return cl, nil
}

// ends returns the last stable offset of each partition of topic, or nil
// if topic does not exist.
func (v *verifier) ends(topic string) (map[int32]int64, error) {
	_, err := v.adm.DescribeTopic(v.ctx, topic)
	if errors.Is(err, broker.ErrTopicNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: changelog %s: %w", topic, err)
	}
	listed, err := v.adm.Kadm().ListCommittedOffsets(v.ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: end of changelog %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var lerr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = fmt.Errorf("checkpoint: end of changelog %s/%d: %w", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out, lerr
}

// sharers returns the other groups, with their queues, whose legacy
// changelog is legacy and which consume their queue: their records are in
// it.
func (v *verifier) sharers(legacy, queue string) ([]string, error) {
	var out []string
	for _, o := range broker.LegacyChangelogOwners(legacy) {
		if o.Group == v.group && o.Queue == queue {
			continue
		}
		offs, err := v.adm.Kadm().FetchOffsets(v.ctx, o.Group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint: committed offsets of group %q: %w", o.Group, err)
		}
		if _, ok := offs[o.Queue]; ok {
			out = append(out, fmt.Sprintf("group %q (queue %q)", o.Group, o.Queue))
		}
	}
	return out, nil
}

// countDataRecords counts the committed data records (not transaction
// markers) of a partition in [from, to).
func countDataRecords(ctx context.Context, conn broker.Conn, topic string, partition int32, from, to int64) (int64, error) {
	if from >= to {
		return 0, nil
	}
	cl, err := conn.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var n int64
	for last := from - 1; last < to-1; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("checkpoint: reading changelog %s/%d: %w", topic, partition, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < to && !r.Attrs.IsControl() {
				n++
			}
			last = max(last, r.Offset)
		})
	}
	return n, nil
}
