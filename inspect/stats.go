package inspect

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

// QueueStats is what a queue holds and how its consumer groups keep up.
type QueueStats struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
	// Tasks counts the retained tasks by state, from their records.
	Tasks map[onceq.TaskState]int64 `json:"tasks"`
	// DueWithin counts the scheduled and retrying tasks due within each
	// horizon of delay.Horizons ("1m", "1h", "1d") from now, the overdue
	// ones included; Overdue counts those past their due time and not
	// yet started, OldestDue is the earliest of those.
	DueWithin map[string]int64 `json:"due_within"`
	Overdue   int64            `json:"overdue"`
	OldestDue time.Time        `json:"oldest_due,omitzero"`
	// Groups are the consumer groups with offsets committed on the queue.
	Groups []GroupStats `json:"groups"`
}

// GroupStats is one consumer group's progress on a queue.
type GroupStats struct {
	Group   string `json:"group"`
	State   string `json:"state"` // the group's state: Stable, Empty, ...
	Members int    `json:"members"`
	// Waiting counts the tasks past the group's committed offsets: tasks
	// submitted and not yet committed by the group. Transaction markers
	// and aborted records take offsets and are no tasks: they are not
	// counted. A partition with more than delay.StatsSampleOffsets
	// records past its offset is estimated from the first ones (Exact is
	// then false).
	Waiting int64 `json:"waiting"`
	Exact   bool  `json:"exact"`
}

// Stats returns the statistics of a queue: its tasks by state, whether it
// is paused, and for each group consuming it the tasks waiting.
func (in *Inspector) Stats(ctx context.Context, queue string) (QueueStats, error) {
	counts, err := in.Counts(ctx, queue)
	if err != nil {
		return QueueStats{}, err
	}
	paused, err := in.Paused(ctx)
	if err != nil {
		return QueueStats{}, err
	}
	st := QueueStats{Queue: queue, Paused: paused[queue], Tasks: counts}
	if err := in.dueStats(queue, &st); err != nil {
		return st, err
	}
	listed, err := in.adm.Kadm().ListGroups(ctx)
	if err != nil {
		return st, fmt.Errorf("inspect: listing the consumer groups: %w", err)
	}
	lags, err := in.adm.Kadm().Lag(ctx, listed.Groups()...)
	if err != nil {
		return st, fmt.Errorf("inspect: the consumer groups' lag: %w", err)
	}
	var spans []*broker.Span
	byGroup := map[string][]*broker.Span{}
	for _, gl := range lags.Sorted() {
		if gl.Error() != nil {
			continue
		}
		parts, ok := gl.Lag[queue]
		if !ok {
			continue
		}
		st.Groups = append(st.Groups, GroupStats{Group: gl.Group, State: gl.State, Members: len(gl.Members), Exact: true})
		for p, l := range parts {
			if l.Lag <= 0 {
				continue
			}
			sp := &broker.Span{Topic: queue, Partition: p, From: l.End.Offset - l.Lag, End: l.End.Offset}
			spans = append(spans, sp)
			byGroup[gl.Group] = append(byGroup[gl.Group], sp)
		}
	}
	if err := broker.CountRecords(ctx, in.cfg.conn, spans, delay.StatsSampleOffsets, delay.StatsSampleBytes, countTimeout); err != nil {
		return st, fmt.Errorf("inspect: counting the tasks waiting: %w", err)
	}
	for i := range st.Groups {
		g := &st.Groups[i]
		for _, sp := range byGroup[g.Group] {
			n, exact := sp.Counted()
			g.Waiting += n
			g.Exact = g.Exact && exact
		}
	}
	slices.SortFunc(st.Groups, func(a, b GroupStats) int { return cmpStrings(a.Group, b.Group) })
	return st, nil
}

// countTimeout bounds the reading of the tasks waiting in one Stats call;
// partitions not read by then are estimated.
const countTimeout = 10 * time.Second

// dueStats fills st's due counts from the queue's due index, reading it
// up to the longest horizon.
func (in *Inspector) dueStats(queue string, st *QueueStats) error {
	now := in.cfg.now().UnixMilli()
	st.DueWithin = map[string]int64{}
	for _, h := range delay.Horizons {
		st.DueWithin[h.Name] = 0 // every horizon shows, zero or not
	}
	longest := delay.Horizons[len(delay.Horizons)-1].D.Milliseconds()
	prefix := queuePrefix(prefixDue, queue)
	upper := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), uint64(now+longest+1))
	it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
	if err != nil {
		return in.dbErr(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		due, _ := indexID(it.Key(), len(prefix))
		if due <= now {
			if st.Overdue == 0 {
				st.OldestDue = time.UnixMilli(due)
			}
			st.Overdue++
		}
		for _, h := range delay.Horizons {
			if due <= now+h.D.Milliseconds() {
				st.DueWithin[h.Name]++
			}
		}
	}
	if err := it.Close(); err != nil {
		return in.dbErr(err)
	}
	return nil
}
