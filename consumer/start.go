package consumer

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/ctltopic"
	"github.com/onceq/onceq/internal/instance"
	"github.com/onceq/onceq/internal/limit"
)

// start connects, checks the queues, makes the changelog topics, opens the
// checkpoint and joins the group.
func (w *Worker) start(ctx context.Context) error {
	var err error
	if w.admin, err = broker.NewAdmin(w.cfg.conn); err != nil {
		return err
	}
	// The looks at the offsets of every partition (quiet.go) reuse the
	// leaders they know for a while: asking for the metadata of thousands
	// of topics on every look cost more than the look.
	if w.scanAdmin, err = broker.NewAdmin(w.cfg.conn, kgo.MetadataMinAge(scanMetadataAge)); err != nil {
		return err
	}
	meta, err := w.admin.Kadm().Metadata(ctx)
	if err != nil {
		return fmt.Errorf("consumer: reaching the brokers %v: %w", w.cfg.conn.Brokers, w.cfg.conn.Explain(err))
	}
	// One request for every queue, one for every changelog, and as few
	// as it takes to create the missing ones: a worker over thousands of
	// queues starts as fast as over one.
	names := w.queues.topics // a lane queue's is its lane
	partitions, err := w.admin.PartitionCounts(ctx, names...)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	var missing []string
	for _, q := range names {
		if _, ok := partitions[q]; !ok {
			missing = append(missing, q)
		}
	}
	switch {
	case len(missing) == 1:
		return fmt.Errorf("consumer: queue %q does not exist: create it with 'onceq topics create %s --partitions N'", missing[0], missing[0])
	case len(missing) > 1:
		return fmt.Errorf("consumer: %d queues do not exist, %q and %q among them: create them with 'onceq topics create NAME --partitions N'", len(missing), missing[0], missing[1])
	}
	w.warnOtherGroups(ctx)
	w.topics = newTopicCache(w.admin)
	for _, q := range names {
		w.topics.known(q)
		w.topics.prepared(q)
	}
	w.topics.seed(partitions, time.Now())
	if w.cfg.guarantee == ExactlyOnce {
		specs := make([]broker.TopicSpec, 0, len(names))
		for _, q := range names {
			specs = append(specs, w.changelogSpec(q, partitions[q]))
		}
		counts, err := w.admin.EnsureTopics(ctx, specs)
		if err != nil {
			return err
		}
		for _, q := range names {
			name := broker.ChangelogTopic(w.cfg.group, q)
			if n := partitions[q]; counts[name] != n {
				return fmt.Errorf("consumer: changelog %s has %d partitions but queue %s has %d: each queue partition needs its changelog partition; add partitions to the changelog", name, counts[name], q, n)
			}
		}
		opts := []checkpoint.Opt{
			checkpoint.ClusterID(meta.Cluster), checkpoint.Group(w.cfg.group), checkpoint.DedupWindow(w.cfg.dedupWindow),
			checkpoint.Logger(w.cfg.log), checkpoint.FS(w.cfg.checkpointFS),
		}
		if w.cfg.noSync {
			opts = append(opts, checkpoint.NoSync())
		}
		if w.store, err = checkpoint.Open(filepath.Join(w.cfg.checkpointDir, "store"), opts...); err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
	}
	// After the changelogs: a worker refused for its changelog creates
	// nothing.
	if w.cfg.planner, err = delay.ClusterPlanner(ctx, w.cfg.conn, w.cfg.planner); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if _, err := w.admin.EnsureTopics(ctx, []broker.TopicSpec{broker.WakeSpec()}); err != nil {
		return fmt.Errorf("consumer: creating the wake-up topic: %w", err)
	}
	if w.cfg.taskRecords {
		specs := make([]broker.TopicSpec, 0, len(names))
		for _, q := range names {
			specs = append(specs, w.recordsSpec(q, partitions[q]))
		}
		if _, err := w.admin.EnsureTopics(ctx, specs); err != nil {
			return fmt.Errorf("consumer: creating the task records topics: %w", err)
		}
	}
	if w.instanceID, err = w.loadInstanceID(); err != nil {
		return err
	}
	// Before the first fetch: a task canceled, or a queue paused, before
	// this worker started is so for it from its first task.
	if w.control, err = ctltopic.Open(ctx, w.cfg.conn, w.cfg.log, w.setPaused); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if !w.cfg.ownLimits { // else the handler's (a nil Client limits nothing)
		if w.limits, err = limit.Open(ctx, w.cfg.conn, w.cfg.log); err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
	}
	w.pauseMu.Lock()
	defer w.pauseMu.Unlock()
	w.fetchMu.Lock()
	w.kafka, err = newKafkaSide(w)
	w.fetchMu.Unlock()
	if err != nil {
		return err
	}
	for _, q := range names {
		if w.control.Paused(q) {
			w.kafka.pauseQueue(q, true)
		}
	}
	return nil
}

// loadInstanceID returns the configured instance ID, or the one kept in the
// checkpoint dir, creating it on first start. A checkpoint in memory keeps
// none: nothing of it outlives the process, and the dir names no place on
// disk (the file would land under the working directory).
func (w *Worker) loadInstanceID() (string, error) {
	if w.cfg.instanceID != "" {
		return w.cfg.instanceID, nil
	}
	if _, mem := w.cfg.checkpointFS.(*vfs.MemFS); w.cfg.checkpointDir == "" || mem {
		return instance.New("onceq-"), nil
	}
	id, err := instance.Load(w.cfg.checkpointDir, "instance-id", "w-")
	if err != nil {
		return "", fmt.Errorf("consumer: %w", err)
	}
	return id, nil
}
