package ctltopic

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, e := range []Entry{
		{Queue: "emails", ID: "order/7", At: at},
		{Queue: "emails", ID: "order/8", At: at, Until: at.Add(7 * 24 * time.Hour)},
		{Queue: "emails", ID: "order-7", Deleted: true},
		{Queue: "emails", Paused: true, At: at},
		{Queue: "emails", Paused: false, At: at},
		{Queue: "emails", Deleted: true},
		{Queue: "fn/resize", ID: "order/7", At: at},
		{Queue: "fn/resize", ID: "a", Deleted: true},
		{Queue: "fn/resize", Paused: true, At: at},
		PriorityNote("emails", at),
		{Queue: "emails", Priority: true, Deleted: true},
	} {
		r := e.Record()
		if r.Topic != Topic {
			t.Fatalf("topic %s", r.Topic)
		}
		got, err := Decode(r.Key, r.Value)
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		if e.Deleted {
			e.At = time.Time{}
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip: got %+v, want %+v", got, e)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"stop/emails", `{"v":1,"at":1}`, "want cancel/<queue>/<task ID>, pause/<queue> or priority/<topic>"},
		{"priority/fn/resize", `{"v":1,"at":1}`, "want priority/<topic>"},
		{"priority/emails", `{"v":1,"at":1,"paused":true}`, `"paused" belongs to a pause record`},
		{"priority/emails", `{"v":1,"at":1,"until":5}`, `"until" belongs to a cancel record`},
		{"cancel/emails", `{"v":1,"at":1}`, "want cancel/<queue>/<task ID>"},
		{"cancel/bad queue/a", `{"v":1,"at":1}`, "want cancel/<queue>/<task ID>"},
		{"pause/", `{"v":1,"paused":true,"at":1}`, "want pause/<queue>"},
		{"pause/emails", `{"v":2,"paused":true,"at":1}`, "version 2"},
		{"pause/emails", `{"v":1,"at":1}`, `"paused" belongs to a pause record`},
		{"cancel/emails/a", `{"v":1,"paused":true,"at":1}`, `"paused" belongs to a pause record`},
		{"cancel/emails/a", `{"v":1,"at":-1}`, "times in unix ms"},
		{"cancel/emails/a", `{"v":1,"at":1,"until":-1}`, "times in unix ms"},
		{"pause/emails", `{"v":1,"paused":true,"at":1,"until":5}`, `"until" belongs to a cancel record`},
		{"cancel/emails/a", `[]`, "control: cancel/emails/a"},
		{"cancel-lane/fn/a", `{"v":1,"at":1}`, "want cancel-lane/<lane>/<label>/<task ID>"},
		{"cancel-lane/fn//a", `{"v":1,"at":1}`, "want cancel-lane/<lane>/<label>/<task ID>"},
		{"pause/fn/", `{"v":1,"paused":true,"at":1}`, "want pause/<queue>"},
	} {
		_, err := Decode([]byte(tc.key), []byte(tc.value))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}

// TestPriorityNoteLapses: a priority note counts for PriorityNoteLife
// after it was written, an older one read later does not put it back, and
// a tombstone removes it.
func TestPriorityNoteLapses(t *testing.T) {
	r := &Reader{log: slog.New(slog.DiscardHandler), canceled: map[string]map[string]time.Time{}, paused: map[string]bool{}, priority: map[string]time.Time{}}
	now := time.Now()
	apply := func(e Entry) {
		rec := e.Record()
		r.apply(rec)
	}
	if r.PriorityNoted("emails") {
		t.Fatal("noted before any note")
	}
	apply(PriorityNote("emails", now.Add(-PriorityNoteLife-time.Minute)))
	if r.PriorityNoted("emails") {
		t.Fatal("a note older than PriorityNoteLife counts")
	}
	apply(PriorityNote("emails", now))
	apply(PriorityNote("emails", now.Add(-PriorityNoteLife-time.Minute)))
	if !r.PriorityNoted("emails") || r.PriorityNoted("other") {
		t.Fatalf("emails noted %v, other %v: want true, false", r.PriorityNoted("emails"), r.PriorityNoted("other"))
	}
	apply(Entry{Queue: "emails", Priority: true, Deleted: true})
	if r.PriorityNoted("emails") {
		t.Fatal("noted after its tombstone")
	}
}

// TestCancelLapses: a cancel holds until its Until and no longer, so that
// a cancel no worker removed never reaches a submission of its ID past
// the dedup window; one without Until (a workflow's) holds until removed.
func TestCancelLapses(t *testing.T) {
	r := &Reader{log: slog.New(slog.DiscardHandler), canceled: map[string]map[string]time.Time{}, paused: map[string]bool{}}
	now := time.Now()
	for _, e := range []Entry{
		{Queue: "q", ID: "lapsed", At: now.Add(-time.Hour), Until: now.Add(-time.Minute)},
		{Queue: "q", ID: "live", At: now, Until: now.Add(time.Hour)},
		{Queue: "q", ID: "kept", At: now},
		{Queue: "q", ID: "gone", At: now, Until: now.Add(time.Hour)},
		{Queue: "q", ID: "gone", Deleted: true},
	} {
		rec := e.Record()
		r.apply(rec)
	}
	for id, want := range map[string]bool{"lapsed": false, "live": true, "kept": true, "gone": false, "other": false} {
		if got := r.Canceled("q", id); got != want {
			t.Errorf("Canceled(%s) = %v, want %v", id, got, want)
		}
	}
}

// FuzzDecode: Decode never panics, and what it accepts encodes to a record
// that decodes to the same entry.
func FuzzDecode(f *testing.F) {
	f.Add("cancel/emails/a", `{"v":1,"at":5}`, false)
	f.Add("pause/emails", `{"v":1,"paused":true,"at":5}`, false)
	f.Add("pause/emails", ``, true)
	f.Add("cancel-lane/fn/resize/a/b", `{"v":1,"at":5}`, false)
	f.Add("cancel/fn/resize", `{"v":1,"at":5}`, false)
	f.Fuzz(func(t *testing.T, key, value string, tombstone bool) {
		var v []byte
		if !tombstone {
			v = []byte(value)
		}
		e, err := Decode([]byte(key), v)
		if err != nil {
			return
		}
		r := e.Record()
		back, err := Decode(r.Key, r.Value)
		if err != nil || !reflect.DeepEqual(back, e) {
			t.Fatalf("%+v encoded %q=%q, decoded %+v, %v", e, r.Key, r.Value, back, err)
		}
	})
}
