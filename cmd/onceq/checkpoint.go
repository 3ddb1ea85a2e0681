package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

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
	s, err := checkpoint.Open(dir, checkpoint.ReadOnly(), checkpoint.ClusterID(clusterID), checkpoint.Group(group), checkpoint.Logger(g.log))
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

func newCheckpointVerifyCmd(g *globals) *cobra.Command {
	var (
		group  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "verify DIR --group GROUP",
		Short: "Compare a checkpoint store with the group's committed offsets and its changelog",
		Long: `For each partition of the store, compare the source offset it recorded with the
offset the consumer group committed, and the changelog offset it recorded with
the group's changelog: records after it are replayed on the worker's next
start; a changelog that ends before it, or is missing, was deleted or
recreated and lost what the store holds; a changelog under its old name
(onceq-changelog-<group>-<queue>) that another group's name shares holds that
group's records too. Exit 1 if any partition drifts, 0 if all are in sync.`,
		Args: exactArgs(1, "one checkpoint directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if group == "" {
				return usagef("--group is required")
			}
			conn, err := g.conn()
			if err != nil {
				return err
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
				drifts, err := checkpoint.Verify(ctx, s, conn, group)
				if err != nil {
					return err
				}
				return printDrift(g.stdout, drifts, asJSON)
			})
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "the consumer group of the worker that wrote the store (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per partition")
	return cmd
}

func printDrift(w io.Writer, drifts []checkpoint.Drift, asJSON bool) error {
	bad := 0
	for _, d := range drifts {
		if !d.InSync() {
			bad++
		}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		for _, d := range drifts {
			if err := enc.Encode(d); err != nil {
				return err
			}
		}
	} else {
		opt := func(v int64) string {
			if v < 0 {
				return "-"
			}
			return fmt.Sprint(v)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTITION\tSOURCE\tCOMMITTED\tCHANGELOG\tCHANGELOG END\tUNAPPLIED\tSTATUS")
		for _, d := range drifts {
			status := "in sync"
			if !d.InSync() {
				status = "drift: " + strings.Join(d.Problems, "; ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", d.TP, opt(d.Source), opt(d.Committed), opt(d.ChangelogOffset), opt(d.ChangelogEnd), d.Unapplied, status)
		}
		tw.Flush()
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d partitions drift: see their status", bad, len(drifts))
	}
	if !asJSON {
		fmt.Fprintf(w, "%d partitions in sync\n", len(drifts))
	}
	return nil
}
