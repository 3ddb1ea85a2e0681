package inspect

import (
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/onceq/onceq"
)

// TableErrorWidth is how much of an error WriteTasks shows.
const TableErrorWidth = 60

// maxTextResult is the longest result WriteTask prints as text.
const maxTextResult = 4096

// WriteTask writes one task's record for a person, a field a line:
//
//	task      order-7
//	queue     emails
//	state     succeeded
//	attempt   2 of 5
//	priority  7
//	enqueued  2026-11-24T12:00:00.120Z
//	started   2026-11-24T12:00:03.200Z
//	finished  2026-11-24T12:00:03.215Z (ran 15ms)
//	worker    onceq-3f2a9c
//	result    {"sent":true}
//	record    emails/3@1042
//
// Unset fields are left out: priority 0, the default, among them. A result that is not printable text is shown
// in base64, and a long one cut, saying so.
func WriteTask(w io.Writer, r onceq.TaskRecord) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	line("task", r.ID)
	line("queue", r.Queue)
	line("state", string(r.State))
	if r.Attempt > 0 {
		a := strconv.Itoa(r.Attempt)
		if r.MaxAttempts > 0 {
			a += " of " + strconv.Itoa(r.MaxAttempts)
		}
		line("attempt", a)
	}
	if r.Priority > 0 {
		line("priority", strconv.Itoa(r.Priority))
	}
	line("enqueued", formatTime(r.Enqueued))
	if r.State == onceq.StateRunning && !r.Started.IsZero() {
		line("started", formatTime(r.Started)+" (running for "+time.Since(r.Started).Round(time.Second).String()+")")
	} else {
		line("started", formatTime(r.Started))
	}
	if f := formatTime(r.Finished); f != "" && !r.Started.IsZero() {
		line("finished", f+" (ran "+Ran(r)+")")
	} else {
		line("finished", f)
	}
	if r.State == onceq.StateRetrying {
		line("next run", formatTime(r.Due))
	} else {
		line("due", formatTime(r.Due))
	}
	line("worker", r.Worker)
	line("reason", r.Reason)
	line("error", r.Error)
	if r.Result != nil {
		line("result", FormatResult(r.Result))
	}
	if r.Worker == "" && !r.State.Final() {
		// A producer's record: its task waits in that partition, not run.
		line("record", r.Queue+"/"+strconv.Itoa(int(r.Partition))+" (not run yet)")
	} else {
		line("record", r.Queue+"/"+strconv.Itoa(int(r.Partition))+"@"+strconv.FormatInt(r.Offset, 10))
	}
	return tw.Flush()
}

// WriteAttempts writes a task's failed attempts (those of Attempts but
// its last record), one a line, under a heading; nothing when there is
// none:
//
//	failed attempts
//	  1  2026-11-24T12:00:00.120Z  ran 3ms  smtp: 550 mailbox unavailable
func WriteAttempts(w io.Writer, rs []onceq.TaskRecord) error {
	if len(rs) < 2 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "failed attempts")
	for _, r := range rs[:len(rs)-1] {
		ran := ""
		if !r.Started.IsZero() && !r.Finished.IsZero() {
			ran = "ran " + Ran(r)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", r.Attempt, formatTime(r.Started), ran, r.Error)
	}
	return tw.Flush()
}

// Ran is how long a run of a task took, from its record's start to its
// end, for a person: "under 1ms" below the records' precision.
func Ran(r onceq.TaskRecord) string {
	d := r.Finished.Sub(r.Started)
	if d < time.Millisecond {
		return "under 1ms"
	}
	return d.String()
}

// FormatResult shows a result for a person: as text when it is printable
// UTF-8 (cut past 4 KiB), in base64 otherwise.
func FormatResult(b []byte) string {
	if len(b) == 0 {
		return "(empty)"
	}
	if !printableText(b) {
		return "base64:" + base64.StdEncoding.EncodeToString(b[:min(len(b), maxTextResult)]) + cutNote(len(b))
	}
	return string(b[:min(len(b), maxTextResult)]) + cutNote(len(b))
}

func cutNote(n int) string {
	if n <= maxTextResult {
		return ""
	}
	return fmt.Sprintf(" ... (%d bytes in all: --json has it whole)", n)
}

// printableText reports whether b is UTF-8 without control characters
// other than tab and newline.
func printableText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < ' ' && r != '\t' && r != '\n' || r == 0x7f {
			return false
		}
	}
	return true
}

// WriteTasks writes task records as a table: ID, state, attempt, the time
// of the last transition, and the error, cut to TableErrorWidth.
func WriteTasks(w io.Writer, rs []onceq.TaskRecord) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tATTEMPT\tAT\tERROR")
	for _, r := range rs {
		text := strings.ReplaceAll(r.Error, "\n", " ")
		if len(text) > TableErrorWidth {
			text = text[:TableErrorWidth-3] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.ID, r.State, r.Attempt, formatTime(transitionTime(r)), text)
	}
	return tw.Flush()
}

// WriteJSON writes task records one JSON object a line, as they are on
// the records topic (results in base64).
func WriteJSON(w io.Writer, rs ...onceq.TaskRecord) error {
	var b []byte
	for i := range rs {
		b = append(rs[i].AppendJSON(b), '\n')
	}
	_, err := w.Write(b)
	return err
}

// transitionTime is when a record's transition happened as far as it tells:
// its finish, else its start, else its enqueue time. A scheduled task's
// due time is in the future, so it does not count.
func transitionTime(r onceq.TaskRecord) time.Time {
	for _, t := range []time.Time{r.Finished, r.Started, r.Enqueued} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}
