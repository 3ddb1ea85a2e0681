package consumer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/control"
	"github.com/onceq/onceq/internal/instance"
)

// start connects, checks the queues, makes the changelog topics, opens the
// checkpoint and joins the group.
func (w *Worker) start(ctx context.Context) error {
	var err error
	if w.admin, err = broker.NewAdmin(w.cfg.conn); err != nil {
		return err
	}
	meta, err := w.admin.Kadm().Metadata(ctx)
	if err != nil {
		return fmt.Errorf("consumer: reaching the brokers %v: %w", w.cfg.conn.Brokers, w.cfg.conn.Explain(err))
	}
	partitions := map[string]int32{}
	for _, q := range w.cfg.queues {
		info, err := w.admin.DescribeTopic(ctx, q)
		if errors.Is(err, broker.ErrTopicNotFound) {
			return fmt.Errorf("consumer: queue %q does not exist: create it with 'onceq topics create %s --partitions N'", q, q)
		}
		if err != nil {
			return err
		}
		partitions[q] = int32(len(info.Partitions))
	}
	w.warnOtherGroups(ctx)
	w.topics = newTopicCache(w.admin)
	for _, q := range w.cfg.queues {
		w.topics.known(q)
	}
	if w.cfg.guarantee == ExactlyOnce {
		for q, n := range partitions {
			name := broker.ChangelogTopic(w.cfg.group, q)
			if err := w.admin.EnsureTopic(ctx, name, n, map[string]string{"cleanup.policy": "compact"}); err != nil {
				return err
			}
			info, err := w.admin.DescribeTopic(ctx, name)
			if err != nil {
				return err
			}
			if int32(len(info.Partitions)) != n {
				return fmt.Errorf("consumer: changelog %s has %d partitions but queue %s has %d: each queue partition needs its changelog partition; add partitions to the changelog", name, len(info.Partitions), q, n)
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
	if w.cfg.taskRecords {
		for q, n := range partitions {
			if err := w.admin.EnsureTopic(ctx, broker.RecordsTopic(q), n, w.recordsTopicConfigs()); err != nil {
				return fmt.Errorf("consumer: creating the task records topic of %s: %w", q, err)
			}
		}
	}
	if w.instanceID, err = w.loadInstanceID(); err != nil {
		return err
	}
	// Before the first fetch: a task canceled, or a queue paused, before
	// this worker started is so for it from its first task.
	if w.control, err = control.Open(ctx, w.cfg.conn, w.cfg.log, w.setPaused); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	w.pauseMu.Lock()
	defer w.pauseMu.Unlock()
	if w.kafka, err = newKafkaSide(w); err != nil {
		return err
	}
	for _, q := range w.cfg.queues {
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
