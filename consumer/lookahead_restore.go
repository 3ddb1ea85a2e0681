package consumer

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Restoring ahead of the fetch. The lookahead reads only restored
// partitions, and the fetch restores a partition on its first record: a
// worker holding MaxBufferedRecords takes a partition's first record only
// once it has room, which behind a backlog takes seconds. So the lookahead
// restores, itself, the partitions from which the fetch has received
// nothing:
//   - at their assignment, when they lag their ends by half the records
//     the worker may buffer or more (a worker joining a backlog), and
//   - while the worker is backlogged, at most once a second (scan).
//
// The fetch starts a restore on a partition's first record because its
// client fetched the group's committed offsets as stable (Kafka's
// RequireStable: no transaction of the previous owner has offsets pending),
// so the changelog holds all the previous owner's marks. The lookahead
// fetches them as stable itself, which holds the same, and reads ahead
// from them (partState.aheadStart). A partition restored so commits
// nothing until the fetch admits its first record: its runs ahead join its
// finished ranges. At least once, a partition needs no restore: the
// lookahead reads it from its committed offset at once.

// joinBacklog is how long a worker that joined a backlog reads ahead
// before its own buffer says whether it is backlogged.
const joinBacklog = 5 * time.Second

// assigned looks at the partitions the worker was just given: if they lag
// their ends by half the records the worker may buffer or more, it
// restores them and reads ahead at once, rather than once the fetch has
// filled the worker's buffer. It does not wait: the group's callbacks
// call it.
func (la *lookahead) assigned(parts []*partState) {
	if la != nil && len(parts) > 0 {
		la.restoreAhead(la.using(parts), true)
	}
}

// restoreAhead restores todo in a goroutine of its own, unless the worker
// has no admin client, is on demand (a queue nobody wants is not fetched,
// and needs no restore), or the lookahead is closed.
func (la *lookahead) restoreAhead(todo []*partState, joining bool) {
	if len(todo) == 0 || la.w.admin == nil || la.w.cfg.onDemand {
		return
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	if la.closed {
		return
	}
	la.restores.Add(1)
	go func() {
		defer la.restores.Done()
		la.restore(la.ctx, todo, joining)
	}()
}

// restore restores the partitions todo that hold records past their
// committed offsets, fetched as stable; each, once restored, is read
// ahead (releaseHeld). Joining, it does so only if they lag enough for a
// backlog, which it then expects for joinBacklog.
func (la *lookahead) restore(ctx context.Context, todo []*partState, joining bool) {
	w := la.w
	ctx, cancel := context.WithTimeout(ctx, w.cfg.sessionTimeout)
	defer cancel()
	offs, err := w.admin.Kadm().FetchOffsets(kadm.RequireStable(ctx), w.cfg.group)
	if err == nil {
		err = offs.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		topics := map[string]bool{}
		for _, ps := range todo {
			topics[ps.tp.Topic] = true
		}
		ends, err = w.admin.Kadm().ListEndOffsets(ctx, slices.Collect(maps.Keys(topics))...)
	}
	if err != nil {
		w.cfg.log.Debug("lookahead: fetching the committed and end offsets; the fetch restores the partitions", "err", err)
		return
	}
	starts := make([]int64, len(todo))
	var lag int64
	for i, ps := range todo {
		starts[i] = -1
		start := int64(0) // none committed: the fetch starts at the log start
		if o, ok := offs.Lookup(ps.tp.Topic, ps.tp.Partition); ok && o.At >= 0 {
			start = o.At
		}
		if end, ok := ends.Lookup(ps.tp.Topic, ps.tp.Partition); ok && end.Err == nil && end.Offset > start {
			starts[i], lag = start, lag+end.Offset-start
		} // else nothing to run, or not known: the fetch restores it when it has
	}
	if joining {
		if lag < int64(w.cfg.maxBuffered/2) {
			return
		}
		la.expect.Store(time.Now().Add(joinBacklog).UnixNano())
	}
	for i, ps := range todo {
		start := starts[i]
		if start < 0 {
			continue
		}
		ps.mu.Lock()
		ok := ps.notStartedLocked() && !w.stopping.Load()
		restored := ps.restored // at least once, a queue whose topics exist
		if ok {
			ps.aheadStart, ps.restoring = start, !restored
		}
		ps.mu.Unlock()
		switch {
		case ok && restored:
			la.consider(ps)
		case ok:
			w.requestRestore(ps)
		}
	}
}
