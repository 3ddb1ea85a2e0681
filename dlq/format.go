package dlq

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onceq/onceq"
)

// TableErrorWidth is where WriteTable cuts error texts.
const TableErrorWidth = 80

// letterJSON is the JSON shape of a dead letter.
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

// MarshalJSON writes a dead letter as one JSON object: id, queue,
// partition, offset, attempt, failed (RFC 3339 in UTC, absent when
// unknown), reason, error, requeued (absent when empty), headers (an
// object of every header in order, repeated keys included), key_base64
// (absent when empty) and payload_base64.
func (l Letter) MarshalJSON() ([]byte, error) {
	out := letterJSON{ID: l.Task.ID, Queue: l.Task.Queue, Partition: l.Partition, Offset: l.Offset, Attempt: l.Task.Attempt,
		Reason: l.Reason, Error: l.Error, Requeued: l.Task.Requeued, Headers: l.Task.Headers,
		KeyBase64: l.Task.Key, PayloadBase64: l.Task.Payload}
	if !l.Failed.IsZero() {
		out.Failed = l.Failed.UTC().Format(time.RFC3339Nano)
	}
	if out.PayloadBase64 == nil {
		out.PayloadBase64 = []byte{}
	}
	return json.Marshal(out)
}

// WriteJSON writes one JSON object per dead letter, a line each.
func WriteJSON(w io.Writer, letters []Letter) error {
	enc := json.NewEncoder(w)
	for i := range letters {
		if err := enc.Encode(letters[i]); err != nil {
			return err
		}
	}
	return nil
}

// WriteTable writes dead letters as a table: where each is, its task ID,
// attempt, failure time, reason, payload size and error text, cut at
// TableErrorWidth.
func WriteTable(w io.Writer, letters []Letter) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION/OFFSET\tID\tATTEMPT\tFAILED\tREASON\tSIZE\tERROR")
	for i := range letters {
		l := &letters[i]
		id := l.Task.ID
		if id == "" {
			id = "-"
		}
		text := l.Error
		if len(text) > TableErrorWidth {
			text = text[:TableErrorWidth-3] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", Coordinates(l), id, strconv.Itoa(l.Task.Attempt), formatFailed(l.Failed), l.Reason, l.Size(), text)
	}
	return tw.Flush()
}

// statsJSON is the JSON shape of a queue's dead-letter counts.
type statsJSON struct {
	Queue       string         `json:"queue"`
	DeadLetters int            `json:"dead_letters"`
	ByReason    map[string]int `json:"by_reason"`
	Oldest      string         `json:"oldest,omitempty"`
	Newest      string         `json:"newest,omitempty"`
}

// MarshalJSON writes a queue's counts as one JSON object: queue,
// dead_letters, by_reason (an object, {} when empty), and oldest and
// newest (RFC 3339 in UTC, absent when no dead letter had a failure time).
func (s QueueStats) MarshalJSON() ([]byte, error) {
	out := statsJSON{Queue: s.Queue, DeadLetters: s.DeadLetters, ByReason: s.ByReason}
	if out.ByReason == nil {
		out.ByReason = map[string]int{}
	}
	if !s.Oldest.IsZero() {
		out.Oldest, out.Newest = s.Oldest.UTC().Format(time.RFC3339Nano), s.Newest.UTC().Format(time.RFC3339Nano)
	}
	return json.Marshal(out)
}

// WriteStatsJSON writes one JSON object per queue, a line each.
func WriteStatsJSON(w io.Writer, stats []QueueStats) error {
	enc := json.NewEncoder(w)
	for _, s := range stats {
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	return nil
}

// WriteStatsTable writes queues' counts as a table, or says that there
// are no dead-letter topics.
func WriteStatsTable(w io.Writer, stats []QueueStats) error {
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.Queue, s.DeadLetters, formatFailed(s.Oldest), formatFailed(s.Newest), strings.Join(reasons, " "))
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
