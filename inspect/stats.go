package inspect

import (
	"context"
	"fmt"
	"slices"

	"github.com/onceq/onceq"
)

// QueueStats is what a queue holds and how its consumer groups keep up.
type QueueStats struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
	// Tasks counts the retained tasks by state, from their records.
	Tasks map[onceq.TaskState]int64 `json:"tasks"`
	// Groups are the consumer groups with offsets committed on the queue.
	Groups []GroupStats `json:"groups"`
}

// GroupStats is one consumer group's progress on a queue.
type GroupStats struct {
	Group   string `json:"group"`
	State   string `json:"state"` // the group's state: Stable, Empty, ...
	Members int    `json:"members"`
	// Waiting is the queue's records past the group's committed offsets:
	// tasks submitted and not yet committed by the group (transaction
	// markers count too, so it is an upper bound).
	Waiting int64 `json:"waiting"`
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
	listed, err := in.adm.Kadm().ListGroups(ctx)
	if err != nil {
		return st, fmt.Errorf("inspect: listing the consumer groups: %w", err)
	}
	lags, err := in.adm.Kadm().Lag(ctx, listed.Groups()...)
	if err != nil {
		return st, fmt.Errorf("inspect: the consumer groups' lag: %w", err)
	}
	for _, gl := range lags.Sorted() {
		if gl.Error() != nil {
			continue
		}
		parts, ok := gl.Lag[queue]
		if !ok {
			continue
		}
		g := GroupStats{Group: gl.Group, State: gl.State, Members: len(gl.Members)}
		for _, l := range parts {
			g.Waiting += max(l.Lag, 0)
		}
		st.Groups = append(st.Groups, g)
	}
	slices.SortFunc(st.Groups, func(a, b GroupStats) int { return cmpStrings(a.Group, b.Group) })
	return st, nil
}
