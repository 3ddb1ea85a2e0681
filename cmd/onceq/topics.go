package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
)

func newTopicsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create, list, describe and delete queues (topics)",
	}
	cmd.AddCommand(newTopicsCreateCmd(g), newTopicsListCmd(g), newTopicsDescribeCmd(g), newTopicsDeleteCmd(g))
	return cmd
}

// withAdmin validates the connection flags, connects and runs fn.
func withAdmin(g *globals, fn func(*broker.Admin) error) error {
	conn, err := g.conn()
	if err != nil {
		return err
	}
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	return fn(adm)
}

func newTopicsCreateCmd(g *globals) *cobra.Command {
	var (
		partitions int32
		configs    []string
		internal   bool
	)
	cmd := &cobra.Command{
		Use:   "create QUEUE",
		Short: "Create a queue",
		Args:  exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			check := onceq.ValidateQueue
			if internal {
				check = onceq.ValidateTopic
			}
			if err := check(name); err != nil {
				return usageError{err}
			}
			if partitions < 1 || partitions > broker.MaxPartitions {
				return usagef("--partitions %d: want 1 to %d", partitions, broker.MaxPartitions)
			}
			cfg, err := broker.ParseConfigs(configs)
			if err != nil {
				return usagef("--config: %w", err)
			}
			return withAdmin(g, func(a *broker.Admin) error {
				if err := a.CreateTopic(cmd.Context(), name, partitions, cfg); err != nil {
					if refusedInput(err) {
						return usageError{err}
					}
					return err
				}
				fmt.Fprintf(g.stdout, "created %s with %d partitions\n", name, partitions)
				return nil
			})
		},
	}
	cmd.Flags().Int32Var(&partitions, "partitions", 8, fmt.Sprintf("number of partitions (1 to %d)", broker.MaxPartitions))
	cmd.Flags().StringArrayVar(&configs, "config", nil, "topic config key=value (repeatable), for example retention.ms=604800000")
	cmd.Flags().BoolVar(&internal, "internal", false, "allow onceq's reserved names (onceq-...): for repairs")
	return cmd
}

func newTopicsListCmd(g *globals) *cobra.Command {
	var internal bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List queues",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withAdmin(g, func(a *broker.Admin) error {
				names, err := a.ListTopics(cmd.Context(), internal)
				if err != nil {
					return err
				}
				for _, n := range names {
					fmt.Fprintln(g.stdout, n)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&internal, "internal", false, "include onceq's and Kafka's internal topics")
	return cmd
}

func newTopicsDescribeCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe QUEUE",
		Short: "Show a queue's partitions, offsets and configs",
		Args:  exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := onceq.ValidateTopic(args[0]); err != nil {
				return usageError{err}
			}
			return withAdmin(g, func(a *broker.Admin) error {
				info, err := a.DescribeTopic(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(g.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(info)
				}
				fmt.Fprintf(g.stdout, "topic %s: %d partitions, %d records\n", info.Name, len(info.Partitions), info.Records())
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PARTITION\tLEADER\tSTART\tEND\tSTABLE")
				for _, p := range info.Partitions {
					fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", p.Partition, p.Leader, p.Start, p.End, p.Stable)
				}
				tw.Flush()
				keys := make([]string, 0, len(info.Configs))
				for k := range info.Configs {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Fprintf(g.stdout, "config %s=%s\n", k, info.Configs[k])
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newTopicsDeleteCmd(g *globals) *cobra.Command {
	var internal bool
	cmd := &cobra.Command{
		Use:   "delete QUEUE",
		Short: "Delete a queue and its records",
		Long: `Delete a queue and its records.

Internal topics (onceq's delay buckets, dead letters and checkpoint
changelogs, which start with "onceq-", and Kafka's own, which start with
"__") are refused without --internal: deleting a changelog, for one, makes
the workers forget which tasks they ran.`,
		Args: exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := onceq.ValidateTopic(name); err != nil {
				return usageError{err}
			}
			if broker.IsInternal(name) && !internal {
				return usagef("topic %q is internal (%s): deleting it loses what it records; "+
					"add --internal if that is what you want (stop the workers first)", name, internalKind(name))
			}
			return withAdmin(g, func(a *broker.Admin) error {
				if err := a.DeleteTopic(cmd.Context(), name); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "deleted %s\n", name)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&internal, "internal", false, "allow deleting an internal topic (onceq-... or __...): for repairs")
	return cmd
}

// internalKind says what an internal topic holds.
func internalKind(name string) string {
	switch {
	case strings.HasPrefix(name, broker.ChangelogPrefix), strings.HasPrefix(name, broker.LegacyChangelogPrefix):
		return "a checkpoint changelog: the processed task IDs and task state of a group's workers"
	case strings.HasPrefix(name, broker.DLQPrefix):
		return "a dead-letter topic"
	case strings.HasPrefix(name, broker.DelayPrefix):
		return "a delay bucket: the delayed tasks and retries waiting in it"
	case strings.HasPrefix(name, "__"):
		return "one of Kafka's own topics"
	}
	return "onceq's names start with onceq-"
}

// refusedInput reports a broker's refusal of a topic request for its
// content: the request was bad input, not a failure.
func refusedInput(err error) bool {
	for _, code := range []error{kerr.InvalidTopicException, kerr.InvalidPartitions, kerr.InvalidReplicationFactor,
		kerr.InvalidReplicaAssignment, kerr.InvalidConfig, kerr.PolicyViolation} {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}
