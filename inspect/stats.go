package inspect

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/delay"
)

// QueueStats is what a queue holds and how its consumer groups keep up.
type QueueStats struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
	// Tasks counts the retained tasks by state, from their records.
	Tasks map[onceq.TaskState]int64 `json:"tasks"`
	// Failed counts the failed attempts of the retained tasks: each
	// attempt that was retried, and each dead task's last.
	Failed int64 `json:"failed"`
	// ByPriority counts the retained tasks not finished yet (pending,
	// scheduled, running or retrying) by priority, 0 to onceq.MaxPriority;
	// priorities of none are left out.
	ByPriority map[int]int64 `json:"by_priority"`
	// DueWithin counts the scheduled and retrying tasks due within each
	// horizon of delay.Horizons ("1m", "1h", "1d") from now, the overdue
	// ones included; Overdue counts those past their due time and not
	// yet started, OldestDue is the earliest of those.
	DueWithin map[string]int64 `json:"due_within"`
	Overdue   int64            `json:"overdue"`
	OldestDue time.Time        `json:"oldest_due,omitzero"`
	// Groups are the consumer groups with offsets committed on the queue.
	Groups []GroupStats `json:"groups"`
	// LaneQueues counts, for a queue of its own topic, the lane queues
	// on that topic (<queue>/<label>) with retained tasks, which
	// Inspector.LaneQueues lists.
	LaneQueues int `json:"lane_queues,omitempty"`
	// LaneTasks counts, for a queue with lane queues, the retained tasks
	// of its whole topic by state: its own and every lane queue's, the
	// lane in total.
	LaneTasks map[onceq.TaskState]int64 `json:"lane_tasks,omitempty"`
	// LaneFailed counts the lane's failed attempts in total, as Failed.
	LaneFailed int64 `json:"lane_failed,omitempty"`
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
	sts, err := in.StatsOf(ctx, []string{queue})
	if err != nil {
		return QueueStats{}, err
	}
	return sts[0], nil
}

// StatsOf returns the statistics of each of queues, in their order, as
// Stats does; what it asks the brokers about is asked once for all of
// them, so a page of a hundred queues costs about what one does. Its
// error is the first queue's that failed.
func (in *Inspector) StatsOf(ctx context.Context, queues []string) ([]QueueStats, error) {
	ts, err := in.tallies(ctx, queues)
	if err != nil {
		return nil, err
	}
	paused, err := in.Paused(ctx)
	if err != nil {
		return nil, err
	}
	sts := make([]QueueStats, len(queues))
	for i, q := range queues {
		sts[i] = QueueStats{Queue: q, Paused: paused[q], Tasks: ts[i].byState(), Failed: ts[i].failed(), ByPriority: ts[i].byPriority()}
		if total, n := in.laneTally(q); n > 0 {
			total.merge(&ts[i])
			sts[i].LaneQueues, sts[i].LaneTasks, sts[i].LaneFailed = n, total.byState(), total.failed()
		}
		if err := in.dueStats(q, &sts[i]); err != nil {
			return nil, err
		}
	}
	if err := in.groupStats(ctx, sts); err != nil {
		return nil, err
	}
	return sts, nil
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
