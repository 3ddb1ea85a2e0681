package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/internal/ops"
)

// delayFlags are the flags of "onceq delay" that "onceq delay stats"
// shares.
type delayFlags struct {
	buckets string
	group   string
}

func (f delayFlags) planner() (*delay.Planner, error) { return parseBuckets(f.buckets) }

func newDelayCmd(g *globals) *cobra.Command {
	var (
		f              delayFlags
		metricsAddr    string
		stateDir       string
		commitInterval time.Duration
		maxHeld        int
		sessionTimeout time.Duration
		txnTimeout     time.Duration
		groupProtocol  string
	)
	cmd := &cobra.Command{
		Use:   "delay",
		Short: "Run the delay service: move delayed tasks on to their queues, exactly once",
		Long: `Run the delay service alone (workers run it too unless told not to). Delayed
tasks wait in the bucket topics of the cluster's ladder (onceq delay ladder:
onceq-delay-1s ... onceq-delay-1d by default); the service moves each on when its time in a bucket is up, to
the next bucket or, when it is due, to its queue: never early, each move
exactly once, in a Kafka transaction with the offset commit. Instances with
the same --group share the buckets; each needs its own --state-dir.

It serves /metrics, /healthz (503 while the brokers do not answer or the group
session is broken) and /readyz (200 once it joined its group) on --metrics-addr
and stops cleanly on SIGINT or SIGTERM. "onceq delay stats" shows what waits.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.planner()
			if err != nil {
				return err
			}
			if stateDir == "" {
				// Without one the instance ID, and so the transactional
				// ID, is new on every start: a restart cannot fence its
				// predecessor's open transaction.
				return usagef("--state-dir is empty: give a directory to keep this instance's ID in, one per instance, for example ./onceq-data/delay")
			}
			if metricsAddr != "" {
				if err := ops.CheckAddr("metrics-addr", metricsAddr); err != nil {
					return err
				}
			}
			conn, err := g.conn()
			if err != nil {
				return err
			}
			reg := ops.NewRegistry()
			svc, err := delay.NewService(delay.Conn(conn), delay.WithPlanner(p), delay.Group(f.group),
				delay.StateDir(stateDir), delay.CommitInterval(commitInterval), delay.MaxHeld(maxHeld),
				delay.SessionTimeout(sessionTimeout), delay.TransactionTimeout(txnTimeout), delay.GroupProtocol(groupProtocol),
				delay.Registerer(reg), delay.Logger(g.log))
			if err != nil {
				return flagError(cmd.Flags(), err)
			}
			stop, err := listenOps(metricsAddr, false, reg, g.log, component{"delay", svc})
			if err != nil {
				return err
			}
			defer stop()
			return svc.Run(cmd.Context())
		},
	}
	pf := cmd.PersistentFlags()
	bucketsFlag(pf, &f.buckets)
	pf.StringVar(&f.group, "group", delay.DefaultGroup, "consumer group; instances of one group share the buckets")
	fl := cmd.Flags()
	fl.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:0", "serve /metrics, /healthz and /readyz here (port 0: any free port, logged; empty: off)")
	fl.StringVar(&stateDir, "state-dir", "./onceq-data/delay", "directory keeping this instance's ID (one per instance)")
	fl.DurationVar(&commitInterval, "commit-interval", delay.DefaultCommitInterval, "shortest time between transactions: bounds the lateness the service adds")
	fl.IntVar(&maxHeld, "max-held", delay.DefaultMaxHeld, "records held in memory ahead of their move, at most (bounds memory)")
	fl.DurationVar(&sessionTimeout, "session-timeout", delay.DefaultSessionTimeout, "group session timeout: how long a silent instance keeps its partitions")
	fl.DurationVar(&txnTimeout, "transaction-timeout", delay.DefaultTransactionTimeout, "transaction timeout, below --session-timeout")
	fl.StringVar(&groupProtocol, "group-protocol", delay.DefaultGroupProtocol, "classic (cooperative-sticky, static membership) or consumer (KIP-848, Kafka 4.0+)")
	cmd.AddCommand(newDelayStatsCmd(g, &f), newDelayLadderCmd(g))
	return cmd
}

// delayStatsOutput is what "onceq delay stats --json" prints.
type delayStatsOutput struct {
	Group     string              `json:"group"`
	Buckets   []delay.BucketStats `json:"buckets"`
	Waiting   int64               `json:"waiting"`
	Exact     bool                `json:"exact"`
	DueWithin map[string]int64    `json:"due_within"`
}

func newDelayStatsCmd(g *globals, f *delayFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show the tasks waiting in each delay bucket and how many fall due soon",
		Long: `Show, per bucket of the ladder, the tasks waiting (the records past the delay
group's committed offsets that are tasks not yet moved: transaction markers and
aborted records are not counted; a partition with more than 2,000 records
waiting is estimated from its first 2,000, shown with "~") and an estimate of
how many fall due within the next minute, hour and day. The estimate assumes delays spread
evenly: a task in a bucket entered it with a remaining delay between that
bucket and the next larger one, and has waited for part of the bucket.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.planner()
			if err != nil {
				return err
			}
			conn, err := g.conn()
			if err != nil {
				return err
			}
			if p == nil {
				if p, _, err = delay.ReadLadder(cmd.Context(), conn); err != nil {
					return err
				}
			}
			st, err := delay.Stats(cmd.Context(), conn, p, f.group)
			if err != nil {
				return err
			}
			out := delayStatsOutput{Group: f.group, Buckets: st, Exact: true, DueWithin: map[string]int64{}}
			for _, b := range st {
				out.Waiting += b.Waiting
				out.Exact = out.Exact && b.Exact
				for h, n := range b.DueWithin {
					out.DueWithin[h] += n
				}
			}
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "BUCKET\tWAITING\tDUE IN 1M\tDUE IN 1H\tDUE IN 1D\t")
			row := func(name string, waiting int64, exact bool, due map[string]int64) {
				approx := ""
				if !exact {
					approx = "~"
				}
				fmt.Fprintf(tw, "%s\t%s%d\t%d\t%d\t%d\t\n", name, approx, waiting, due["1m"], due["1h"], due["1d"])
			}
			for _, b := range st {
				row(b.Bucket, b.Waiting, b.Exact, b.DueWithin)
			}
			row("total", out.Waiting, out.Exact, out.DueWithin)
			if err := tw.Flush(); err != nil {
				return err
			}
			if !out.Exact {
				fmt.Fprintf(g.stdout, "~ estimated from the first %d records of each partition\n", delay.StatsSampleOffsets)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
