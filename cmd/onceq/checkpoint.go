package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/checkpoint"
)

func newCheckpointCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Inspect and verify a worker's checkpoint store",
		Long: `A worker keeps its checkpoint store (offsets, processed task IDs, task state)
in its --checkpoint-dir. These commands open it read-only; the worker using it
must be stopped.`,
	}
	cmd.AddCommand(newCheckpointInspectCmd(g), newCheckpointVerifyCmd(g))
	return cmd
}

// openCheckpoint opens the store in dir read-only. A missing store or one of
// another group is bad input (exit 2); one in use or damaged is a failure.
func openCheckpoint(g *globals, dir, clusterID, group string) (*checkpoint.Store, error) {
	s, err := checkpoint.Open(dir, checkpoint.Options{ReadOnly: true, ClusterID: clusterID, Group: group, Logger: g.log})
	if errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, checkpoint.ErrMismatch) || errors.Is(err, checkpoint.ErrInvalid) {
		return nil, usageError{err}
	}
	return s, err
}

func newCheckpointInspectCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect DIR",
		Short: "Show a checkpoint store: its group, partitions, offsets, ID and state counts, size",
		Args:  exactArgs(1, "one checkpoint directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openCheckpoint(g, args[0], "", "")
			if err != nil {
				return err
			}
			defer s.Close()
			st, err := s.Stats(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Dir string `json:"dir"`
					checkpoint.Stats
				}{args[0], st})
			}
			printStats(g.stdout, args[0], st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printStats(w io.Writer, dir string, st checkpoint.Stats) {
	fmt.Fprintf(w, "checkpoint store %s\n", dir)
	fmt.Fprintf(w, "format version %d, cluster %s, group %s, %s on disk, %d partitions\n",
		st.FormatVersion, st.ClusterID, st.Group, formatBytes(st.DiskBytes), len(st.Partitions))
	if len(st.Partitions) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tSOURCE\tCHANGELOG\tIDS\tSTATE KEYS\tBYTES")
	for _, p := range st.Partitions {
		src, cl := "-", "-"
		if p.Offsets != nil {
			src, cl = fmt.Sprint(p.Offsets.Source), fmt.Sprint(p.Offsets.Changelog)
		}
		fmt.Fprintf(tw, "%s/%d\t%s\t%s\t%d\t%d\t%s\n", p.Topic, p.Partition, src, cl, p.IDs, p.StateKeys, formatBytes(p.DiskBytes))
	}
	tw.Flush()
}

func formatBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// partitionDrift compares one partition of a store with Kafka.
type partitionDrift struct {
	tp        checkpoint.TP
	source    int64 // the store's; -1: none
	committed int64 // the group's; -1: none
	changelog int64 // the store's next changelog offset; -1: none
	end       int64 // the changelog's last stable offset
	unapplied int64 // changelog records in [changelog, end) that are not in the store
}

func (d partitionDrift) drifts() bool { return d.source != d.committed || d.unapplied > 0 }

func newCheckpointVerifyCmd(g *globals) *cobra.Command {
	var group string
	cmd := &cobra.Command{
		Use:   "verify DIR --group GROUP",
		Short: "Compare a checkpoint store with the group's committed offsets and its changelog",
		Long: `For each partition of the store, compare the source offset it recorded with the
offset the consumer group committed, and count the changelog records after the
changelog offset it recorded (replayed on the worker's next start). Exit 1 if
any partition drifts, 0 if all are in sync.`,
		Args: exactArgs(1, "one checkpoint directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if group == "" {
				return usagef("--group is required")
			}
			return withAdmin(g, func(a *broker.Admin) error {
				ctx := cmd.Context()
				meta, err := a.Kadm().Metadata(ctx)
				if err != nil {
					return fmt.Errorf("reading cluster metadata: %w", err)
				}
				s, err := openCheckpoint(g, args[0], meta.Cluster, group)
				if err != nil {
					return err
				}
				defer s.Close()
				drifts, err := checkpointDrift(ctx, g, a, s, group)
				if err != nil {
					return err
				}
				return printDrift(g.stdout, drifts)
			})
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "the consumer group of the worker that wrote the store (required)")
	return cmd
}

// checkpointDrift compares every partition of the store with Kafka.
func checkpointDrift(ctx context.Context, g *globals, a *broker.Admin, s *checkpoint.Store, group string) ([]partitionDrift, error) {
	tps, err := s.Partitions()
	if err != nil {
		return nil, err
	}
	committed, err := a.Kadm().FetchOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("committed offsets of group %q: %w", group, err)
	}
	var out []partitionDrift
	for _, tp := range tps {
		d := partitionDrift{tp: tp, source: -1, committed: -1, changelog: -1}
		if o, ok, err := s.Checkpoint(tp); err != nil {
			return nil, err
		} else if ok {
			d.source, d.changelog = o.Source, o.Changelog
		}
		if c, ok := committed.Lookup(tp.Topic, tp.Partition); ok {
			if c.Err != nil {
				return nil, fmt.Errorf("committed offset of %s: %w", tp, c.Err)
			}
			d.committed = c.At
		}
		topic := broker.ChangelogTopic(group, tp.Topic)
		ends, err := a.Kadm().ListCommittedOffsets(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("end of changelog %s: %w", topic, err)
		}
		end, ok := ends.Lookup(topic, tp.Partition)
		if !ok || end.Err != nil {
			return nil, fmt.Errorf("end of changelog %s/%d: not found (%v)", topic, tp.Partition, end.Err)
		}
		d.end = end.Offset
		if d.unapplied, err = countDataRecords(ctx, g, topic, tp.Partition, max(d.changelog, 0), d.end); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// countDataRecords counts the committed data records (not transaction
// markers) of a partition in [from, to).
func countDataRecords(ctx context.Context, g *globals, topic string, partition int32, from, to int64) (int64, error) {
	if from >= to {
		return 0, nil
	}
	conn, err := g.conn()
	if err != nil {
		return 0, err
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
			return 0, fmt.Errorf("reading changelog %s/%d: %w", topic, partition, err)
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

func printDrift(w io.Writer, drifts []partitionDrift) error {
	opt := func(v int64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprint(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tSOURCE\tCOMMITTED\tCHANGELOG\tCHANGELOG END\tUNAPPLIED\tSTATUS")
	bad := 0
	for _, d := range drifts {
		status := "in sync"
		if d.drifts() {
			bad++
			switch {
			case d.source > d.committed:
				status = "drift: the store is ahead of the group's commit"
			case d.source != d.committed:
				status = "drift: the store is behind the group's commit"
			default:
				status = "drift: changelog records not in the store"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", d.tp, opt(d.source), opt(d.committed), opt(d.changelog), d.end, d.unapplied, status)
	}
	tw.Flush()
	if bad > 0 {
		return fmt.Errorf("%d of %d partitions drift; a worker replays the changelog when it starts, a store ahead of the group means the store belongs elsewhere", bad, len(drifts))
	}
	fmt.Fprintf(w, "%d partitions in sync\n", len(drifts))
	return nil
}
