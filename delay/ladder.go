package delay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/table"
)

// The cluster's ladder is one record of the compacted topic LadderTopic,
// rather than a ladder derived from the bucket topics that exist: a
// producer creates a bucket topic when it first routes a task to it, so
// the topics that exist are any part of a ladder, and a removed bucket
// keeps its topic while the tasks in it drain. One record says which
// ladder every process routes by; the delay service reads every bucket
// topic that exists besides (see Service), so a task routed by a process
// that started before a change still moves on.

// LadderTopic is the compacted topic that holds the cluster's ladder.
const LadderTopic = broker.LadderTopic

// ladderKey is the key of the ladder record.
var ladderKey = []byte("ladder")

// ladderValue is the JSON of the ladder record.
type ladderValue struct {
	V       int      `json:"v"`
	Buckets []string `json:"buckets"`
	At      int64    `json:"at"`
}

// ReadLadder returns the cluster's ladder and whether one was set. A
// cluster whose ladder was never set routes by DefaultBuckets: ReadLadder
// then returns DefaultPlanner() and false.
func ReadLadder(ctx context.Context, conn broker.Conn) (*Planner, bool, error) {
	// Reading creates nothing: a cluster without the topic has the
	// default ladder.
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return nil, false, err
	}
	_, err = adm.DescribeTopic(ctx, LadderTopic)
	adm.Close()
	switch {
	case errors.Is(err, broker.ErrTopicNotFound):
		return DefaultPlanner(), false, nil
	case err != nil:
		return nil, false, fmt.Errorf("delay: reading the cluster's ladder: %w", err)
	}
	var (
		mu   sync.Mutex
		last []byte
	)
	f, err := table.Follow(ctx, conn, LadderTopic, slog.New(slog.DiscardHandler), func(r *kgo.Record) {
		if string(r.Key) != string(ladderKey) {
			return
		}
		mu.Lock()
		last = r.Value
		mu.Unlock()
	})
	if err != nil {
		return nil, false, fmt.Errorf("delay: reading the cluster's ladder: %w", err)
	}
	f.Close()
	mu.Lock()
	defer mu.Unlock()
	if last == nil {
		return DefaultPlanner(), false, nil
	}
	p, err := decodeLadder(last)
	if err != nil {
		return nil, false, err
	}
	return p, true, nil
}

func decodeLadder(b []byte) (*Planner, error) {
	var v ladderValue
	if err := json.Unmarshal(b, &v); err != nil || v.V != 1 {
		return nil, fmt.Errorf("delay: the ladder record of %s (%.100q): want version 1 JSON: set it again with onceq delay ladder set", LadderTopic, b)
	}
	p, err := ParseLadder(strings.Join(v.Buckets, " "))
	if err != nil {
		return nil, fmt.Errorf("delay: the ladder record of %s: %w", LadderTopic, err)
	}
	return p, nil
}

// SetLadder makes p the cluster's ladder: it creates p's bucket topics,
// then writes the ladder record, so that no process routes a task to a
// bucket topic that does not exist. Processes read the ladder when they
// start: restart them to route by the new one. Until then the delay
// services go on reading the old buckets, so nothing waits in a bucket no
// service reads; a bucket topic left out of the ladder can be deleted
// once `onceq delay stats` shows it empty.
func SetLadder(ctx context.Context, conn broker.Conn, p *Planner) error {
	if p == nil {
		return ladderErr("nil planner")
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	var specs []broker.TopicSpec
	for _, t := range p.Topics() {
		specs = append(specs, broker.BucketSpec(t))
	}
	if _, err := adm.EnsureTopics(ctx, specs); err != nil {
		return fmt.Errorf("delay: creating the bucket topics: %w", err)
	}
	if err := table.Ensure(ctx, adm, LadderTopic); err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	v := ladderValue{V: 1, At: time.Now().UnixMilli()}
	for _, b := range p.Buckets() {
		v.Buckets = append(v.Buckets, broker.FormatBucket(b))
	}
	b, _ := json.Marshal(v) // strings and numbers
	cl, err := conn.NewClient(kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: LadderTopic, Key: ladderKey, Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("delay: writing the ladder to %s: %w", LadderTopic, err)
	}
	return nil
}

// ErrLadderMismatch is wrapped by ClusterPlanner's refusal of a ladder
// that differs from the cluster's.
var ErrLadderMismatch = errors.New("the ladder differs from the cluster's")

// ClusterPlanner returns the planner a process routes by: the cluster's
// ladder (ReadLadder). want, if not nil, is the ladder the process was
// given: on a cluster whose ladder was never set, the first process given
// one sets it (SetLadder), and any later one must give the same, or leave
// it unset; a different ladder is refused (ErrLadderMismatch) with what
// to do: a change of ladder is an explicit `onceq delay ladder set`.
func ClusterPlanner(ctx context.Context, conn broker.Conn, want *Planner) (*Planner, error) {
	have, set, err := ReadLadder(ctx, conn)
	if err != nil || want == nil {
		return have, err
	}
	if !set && !want.Equal(have) {
		if err := SetLadder(ctx, conn, want); err != nil {
			return nil, err
		}
		// Two processes may set it at once: the last record wins, and
		// the other one is refused below.
		if have, _, err = ReadLadder(ctx, conn); err != nil {
			return nil, err
		}
	}
	if !want.Equal(have) {
		return nil, fmt.Errorf("delay: %w: given %s, the cluster's (%s) is %s: give the cluster's ladder or none (the cluster's applies), or change the cluster's with onceq delay ladder set '%s' (or delay.SetLadder)",
			ErrLadderMismatch, FormatLadder(want.Buckets()), LadderTopic, FormatLadder(have.Buckets()), FormatLadder(want.Buckets()))
	}
	return have, nil
}

// Equal reports whether two planners have the same ladder.
func (p *Planner) Equal(o *Planner) bool {
	return p != nil && o != nil && slices.Equal(p.buckets, o.buckets)
}

// BucketTopics returns the bucket topics that exist (onceq-delay-<d>,
// whatever the ladder), with their buckets.
func BucketTopics(ctx context.Context, adm *broker.Admin) (map[string]time.Duration, error) {
	details, err := adm.Kadm().ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("delay: listing the bucket topics: %w", err)
	}
	out := map[string]time.Duration{}
	for name := range details {
		if b, ok := bucketOf(name); ok {
			out[name] = b
		}
	}
	return out, nil
}

// bucketOf reads a bucket topic's name: onceq-delay-<d>.
func bucketOf(topic string) (time.Duration, bool) {
	s, ok := strings.CutPrefix(topic, broker.DelayPrefix)
	if !ok {
		return 0, false
	}
	b, err := broker.ParseBucket(s)
	if err != nil || b > MaxBucket || broker.DelayTopic(b) != topic {
		return 0, false
	}
	return b, true
}
