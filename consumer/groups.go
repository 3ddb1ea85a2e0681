package consumer

import (
	"context"
	"slices"
	"strings"
	"time"
)

// warnOtherGroups logs a warning for each of the worker's queues that
// another consumer group has offsets committed on: each group runs every
// task of a queue, so a worker started with another --group by mistake
// runs the tasks the first group runs (or already ran) a second time.
// Groups onceq runs beside workers (the delay and workflow services, the
// HTTP pull consumers) read other topics and are not named. It only
// warns: two groups on one queue may be wanted (two pipelines).
func (w *Worker) warnOtherGroups(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	listed, err := w.admin.Kadm().ListGroups(ctx)
	if err != nil {
		w.cfg.log.Debug("listing the consumer groups to check the queues' other groups failed", "err", err)
		return
	}
	var groups []string
	for _, g := range listed.Groups() {
		if g != w.cfg.group {
			groups = append(groups, g)
		}
	}
	if len(groups) == 0 {
		return
	}
	fetched := w.admin.Kadm().FetchManyOffsets(ctx, groups...)
	for _, q := range w.queues.topics {
		var others []string
		for g, r := range fetched {
			if r.Err == nil && len(r.Fetched[q]) > 0 {
				others = append(others, g)
			}
		}
		if len(others) == 0 {
			continue
		}
		slices.Sort(others)
		w.cfg.log.Warn("another consumer group already consumes this queue: each group runs every task of it; to share the work with it, give this worker its group",
			"queue", q, "group", w.cfg.group, "other_groups", strings.Join(others, ","))
	}
}
