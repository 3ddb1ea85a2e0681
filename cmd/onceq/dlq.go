package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/producer"
)

// listErrorWidth is where "onceq dlq list" cuts error texts.
const listErrorWidth = 80

func newDLQCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, count and requeue dead letters",
		Long: `Dead letters are the tasks a worker gave up on: failed on their last attempt
(max_attempts), sent there by the handler (failed), expired before they ran
(expired), or unreadable (malformed). They are kept in onceq-dlq-QUEUE with every
original header. The commands read them as any read_committed consumer does, up
to the last stable offset at the time of the call.`,
	}
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", time.Minute, "give up reading and writing after this long")
	cmd.AddCommand(newDLQListCmd(g, &timeout), newDLQRequeueCmd(g, &timeout), newDLQStatsCmd(g, &timeout))
	return cmd
}

// withReader checks the queue names and the timeout, connects a dead-letter
// reader and runs fn with a context bounded by the timeout.
func withReader(cmd *cobra.Command, g *globals, timeout time.Duration, queues []string, fn func(context.Context, *dlq.Reader) error) error {
	for _, q := range queues {
		if err := onceq.ValidateQueue(q); err != nil {
			return usageError{err}
		}
	}
	if timeout <= 0 {
		return usagef("--timeout %v: want a positive duration such as 30s", timeout)
	}
	conn, err := g.conn()
	if err != nil {
		return err
	}
	r, err := dlq.NewReader(conn)
	if err != nil {
		return err
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	return fn(ctx, r)
}

func newDLQListCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var (
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "Show a queue's dead letters",
		Long: `Show a queue's dead letters in partition and offset order: where each is, its
task ID, attempt, failure time, reason, payload size and error text (cut; --json
has it whole, with the headers and the payload).`,
		Args: exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usagef("--limit %d: want 0 (all) or more", limit)
			}
			queue := args[0]
			return withReader(cmd, g, *timeout, args, func(ctx context.Context, r *dlq.Reader) error {
				// Partitions interleave: keep each one's first limit
				// letters, then the first limit of all in order.
				var letters []dlq.Letter
				perPartition := map[int32]int{}
				total := 0
				err := r.Read(ctx, queue, func(l dlq.Letter) error {
					total++
					if limit == 0 || perPartition[l.Partition] < limit {
						perPartition[l.Partition]++
						letters = append(letters, l)
					}
					return nil
				})
				if err != nil {
					return err
				}
				sort.SliceStable(letters, func(i, j int) bool { return letters[i].Partition < letters[j].Partition })
				if limit > 0 && len(letters) > limit {
					letters = letters[:limit]
				}
				if asJSON {
					err = listJSON(g.stdout, letters)
				} else {
					err = listTable(g.stdout, letters)
				}
				if err == nil && len(letters) < total {
					fmt.Fprintf(g.stderr, "%d of %d dead letters shown: --limit 0 shows all\n", len(letters), total)
				}
				return err
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many dead letters (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per dead letter")
	return cmd
}

func listTable(w io.Writer, letters []dlq.Letter) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION/OFFSET\tID\tATTEMPT\tFAILED\tREASON\tSIZE\tERROR")
	for i := range letters {
		l := &letters[i]
		id := l.Task.ID
		if id == "" {
			id = "-"
		}
		text := l.Error
		if len(text) > listErrorWidth {
			text = text[:listErrorWidth-3] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", dlq.Coordinates(l), id, strconv.Itoa(l.Task.Attempt), formatFailed(l.Failed), l.Reason, l.Size(), text)
	}
	return tw.Flush()
}

// letterJSON is a line of "onceq dlq list --json".
type letterJSON struct {
	ID            string      `json:"id"`
	Queue         string      `json:"queue"`
	Partition     int32       `json:"partition"`
	Offset        int64       `json:"offset"`
	Attempt       int         `json:"attempt"`
	Failed        string      `json:"failed,omitempty"`
	Reason        string      `json:"reason"`
	Error         string      `json:"error"`
	Requeued      string      `json:"requeued,omitempty"`
	Headers       headersJSON `json:"headers"`
	KeyBase64     []byte      `json:"key_base64,omitempty"`
	PayloadBase64 []byte      `json:"payload_base64"`
}

// headersJSON writes headers as a JSON object in their order, repeated
// keys included.
type headersJSON []onceq.Header

func (hs headersJSON) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, h := range hs {
		if i > 0 {
			b = append(b, ',')
		}
		k, _ := json.Marshal(h.Key)
		v, _ := json.Marshal(string(h.Value))
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}

func listJSON(w io.Writer, letters []dlq.Letter) error {
	enc := json.NewEncoder(w)
	for i := range letters {
		l := &letters[i]
		out := letterJSON{ID: l.Task.ID, Queue: l.Task.Queue, Partition: l.Partition, Offset: l.Offset, Attempt: l.Task.Attempt,
			Reason: l.Reason, Error: l.Error, Requeued: l.Task.Requeued, Headers: l.Task.Headers,
			KeyBase64: l.Task.Key, PayloadBase64: l.Task.Payload}
		if !l.Failed.IsZero() {
			out.Failed = l.Failed.UTC().Format(time.RFC3339Nano)
		}
		if out.PayloadBase64 == nil {
			out.PayloadBase64 = []byte{}
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}

func newDLQRequeueCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var (
		ids                []string
		all, reset, dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "requeue QUEUE (--id ID ... | --all)",
		Short: "Write dead letters back to their queue, exactly once",
		Long: `Write dead letters back to their queue as new incarnations of their tasks: the
same ID, key, payload and headers, with onceq-requeued set to the dead letter's
PARTITION/OFFSET, so a worker runs them although their ID was processed. For
each ID the newest dead letter is requeued. All of them are written in one
transaction, or none.

Requeueing is exactly once: running the same requeue twice writes the task
twice under one dedup key, and a worker runs it once.

A requeued task keeps its attempt number: one that used up its attempts runs
once more, and goes back to the dead letters if that fails. --reset-attempts
starts it over at attempt 1. Requeue one dead letter always with or always
without --reset-attempts: mixing them may run it twice.

Malformed dead letters cannot be requeued: --all skips them with a message;
--id naming one, or an ID without dead letters, exits 1 (the others are
requeued).`,
		Args: exactArgs(1, "one queue name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(ids) > 0) {
				return usagef("give --id ID (repeatable) or --all, not both and not neither")
			}
			for _, id := range ids {
				if err := onceq.ValidateID(id); err != nil {
					return usageError{fmt.Errorf("--id: %w", err)}
				}
			}
			ids = slices.Compact(slices.Sorted(slices.Values(ids)))
			queue := args[0]
			return withReader(cmd, g, *timeout, args, func(ctx context.Context, r *dlq.Reader) error {
				want := map[string]bool{}
				for _, id := range ids {
					want[id] = true
				}
				var letters []dlq.Letter
				err := r.Read(ctx, queue, func(l dlq.Letter) error {
					if all || want[l.Task.ID] {
						letters = append(letters, l)
					}
					return nil
				})
				if err != nil {
					return err
				}
				rs, problems := dlq.Choose(queue, letters, ids, reset, time.Now())
				return requeue(ctx, g, queue, rs, problems, all, dryRun)
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&ids, "id", nil, "requeue the newest dead letter of this task ID (repeatable)")
	f.BoolVar(&all, "all", false, "requeue the newest dead letter of every task ID")
	f.BoolVar(&reset, "reset-attempts", false, "start the requeued tasks over at attempt 1")
	f.BoolVar(&dryRun, "dry-run", false, "show what would be requeued, write nothing")
	return cmd
}

// requeue writes the chosen dead letters and reports them and the
// problems: skipped with --all, a failure with --id.
func requeue(ctx context.Context, g *globals, queue string, rs []dlq.Requeue, problems []error, all, dryRun bool) error {
	if all {
		for _, p := range problems {
			fmt.Fprintf(g.stderr, "skipped: %v\n", strings.TrimPrefix(p.Error(), "dlq: "))
		}
	}
	verb := "requeued"
	if dryRun {
		verb = "would requeue"
	} else if len(rs) > 0 {
		conn, err := g.conn()
		if err != nil {
			return err
		}
		p, err := producer.New(producer.Conn(conn), producer.Logger(g.log))
		if err != nil {
			return err
		}
		defer p.Close()
		if err := dlq.Write(ctx, p, rs); err != nil {
			return err
		}
	}
	for _, r := range rs {
		fmt.Fprintf(g.stdout, "%s %s from %s (attempt %d)\n", verb, r.Task.ID, dlq.Coordinates(&r.From), r.Task.Attempt)
	}
	fmt.Fprintf(g.stdout, "%s %d dead letters to %s\n", verb, len(rs), queue)
	if !all && len(problems) > 0 {
		return errors.Join(problems...)
	}
	return nil
}

// statsJSON is a line of "onceq dlq stats --json".
type statsJSON struct {
	Queue       string         `json:"queue"`
	DeadLetters int            `json:"dead_letters"`
	ByReason    map[string]int `json:"by_reason"`
	Oldest      string         `json:"oldest,omitempty"`
	Newest      string         `json:"newest,omitempty"`
}

type queueStats struct {
	queue string
	dlq.Stats
}

func newDLQStatsCmd(g *globals, timeout *time.Duration) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [QUEUE...]",
		Short: "Count dead letters by reason",
		Long: `Count the dead letters of each queue by reason, with the oldest and newest
failure time. Without a queue, every queue that has a dead-letter topic.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withReader(cmd, g, *timeout, args, func(ctx context.Context, r *dlq.Reader) error {
				queues := args
				if len(queues) == 0 {
					var err error
					if queues, err = r.Queues(ctx); err != nil {
						return err
					}
				}
				var stats []queueStats
				for _, q := range queues {
					s := queueStats{queue: q}
					if err := r.Read(ctx, q, func(l dlq.Letter) error { s.Add(l); return nil }); err != nil {
						return err
					}
					stats = append(stats, s)
				}
				if asJSON {
					return statsJSONLines(g.stdout, stats)
				}
				return statsTable(g.stdout, stats)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per queue")
	return cmd
}

func statsJSONLines(w io.Writer, stats []queueStats) error {
	enc := json.NewEncoder(w)
	for _, s := range stats {
		out := statsJSON{Queue: s.queue, DeadLetters: s.DeadLetters, ByReason: s.ByReason}
		if out.ByReason == nil {
			out.ByReason = map[string]int{}
		}
		if !s.Oldest.IsZero() {
			out.Oldest, out.Newest = s.Oldest.UTC().Format(time.RFC3339Nano), s.Newest.UTC().Format(time.RFC3339Nano)
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}

func statsTable(w io.Writer, stats []queueStats) error {
	if len(stats) == 0 {
		_, err := fmt.Fprintln(w, "no dead-letter topics")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tDEAD\tOLDEST\tNEWEST\tBY REASON")
	for _, s := range stats {
		var reasons []string
		for _, r := range slices.Sorted(maps.Keys(s.ByReason)) {
			reasons = append(reasons, r+"="+strconv.Itoa(s.ByReason[r]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.queue, s.DeadLetters, formatFailed(s.Oldest), formatFailed(s.Newest), strings.Join(reasons, " "))
	}
	return tw.Flush()
}

// formatFailed writes a failure time for a table: UTC, to the second.
func formatFailed(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
