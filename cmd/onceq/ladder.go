package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

// bucketsUsage is the help of every --buckets flag.
const bucketsUsage = "the delay bucket ladder this process expects (durations such as 100ms, 5s, 2m, 6h, 1d); empty: the cluster's (onceq delay ladder), which a different one is refused against"

// bucketsFlag adds --buckets to fl.
func bucketsFlag(fl *pflag.FlagSet, v *string) {
	fl.StringVar(v, "buckets", "", bucketsUsage)
}

// parseBuckets reads a --buckets flag: nil for empty, the cluster's.
func parseBuckets(s string) (*delay.Planner, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	p, err := delay.ParseLadder(s)
	if err != nil {
		return nil, usagef("--buckets: %v", err)
	}
	return p, nil
}

func newDelayLadderCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ladder",
		Short: "Show the cluster's delay ladder; ladder set changes it",
		Long: `Show the delay ladder of the cluster: the buckets every producer, worker, delay
service, scheduler and onceq serve route delayed tasks by, kept in the compacted
topic ` + delay.LadderTopic + ` (the default, ` + delay.FormatLadder(delay.DefaultBuckets) + `, until one is set),
and the bucket topics that exist outside it (still read by the delay services
until they are deleted).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			conn, err := g.conn()
			if err != nil {
				return err
			}
			p, set, err := delay.ReadLadder(cmd.Context(), conn)
			if err != nil {
				return err
			}
			how := "set"
			if !set {
				how = "default: none set"
			}
			fmt.Fprintf(g.stdout, "ladder  %s (%s)\n", delay.FormatLadder(p.Buckets()), how)
			adm, err := broker.NewAdmin(conn)
			if err != nil {
				return err
			}
			defer adm.Close()
			topics, err := delay.BucketTopics(cmd.Context(), adm)
			if err != nil {
				return err
			}
			var others []string
			for t := range topics {
				if !slices.Contains(p.Topics(), t) {
					others = append(others, t)
				}
			}
			slices.Sort(others)
			if len(others) > 0 {
				fmt.Fprintf(g.stdout, "outside %s (read until deleted: delete each once onceq delay stats --buckets shows it empty)\n", strings.Join(others, " "))
			}
			return nil
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "set LADDER",
		Short: "Change the cluster's delay ladder",
		Long: `Change the cluster's delay ladder, for example: onceq delay ladder set 1s,10s,1m,10m,1h,1d

It creates the new ladder's bucket topics, then records the ladder in
` + delay.LadderTopic + `. Processes read the ladder when they start: restart them
to route by the new one; one given a different --buckets is refused. Tasks in
the buckets of the old ladder still move on: every delay service reads every
bucket topic that exists.`,
		Args: exactArgs(1, "a ladder such as 1s,10s,1m"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := delay.ParseLadder(args[0])
			if err != nil {
				return usageError{err}
			}
			conn, err := g.conn()
			if err != nil {
				return err
			}
			if err := delay.SetLadder(cmd.Context(), conn, p); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "the cluster's ladder is %s: restart the producers, workers, delay services, schedulers and servers to route by it\n", delay.FormatLadder(p.Buckets()))
			return nil
		},
	})
	return cmd
}
