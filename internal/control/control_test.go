package control

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, e := range []Entry{
		{Queue: "emails", ID: "order/7", At: at},
		{Queue: "emails", ID: "order-7", Deleted: true},
		{Queue: "emails", Paused: true, At: at},
		{Queue: "emails", Paused: false, At: at},
		{Queue: "emails", Deleted: true},
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
		{"stop/emails", `{"v":1,"at":1}`, "want cancel/<queue>/<task ID> or pause/<queue>"},
		{"cancel/emails", `{"v":1,"at":1}`, "want cancel/<queue>/<task ID>"},
		{"cancel/bad queue/a", `{"v":1,"at":1}`, "want cancel/<queue>/<task ID>"},
		{"pause/", `{"v":1,"paused":true,"at":1}`, "want pause/<queue>"},
		{"pause/emails", `{"v":2,"paused":true,"at":1}`, "version 2"},
		{"pause/emails", `{"v":1,"at":1}`, `"paused" belongs to a pause record`},
		{"cancel/emails/a", `{"v":1,"paused":true,"at":1}`, `"paused" belongs to a pause record`},
		{"cancel/emails/a", `{"v":1,"at":-1}`, "a time in unix ms"},
		{"cancel/emails/a", `[]`, "control: cancel/emails/a"},
	} {
		_, err := Decode([]byte(tc.key), []byte(tc.value))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}

// FuzzDecode: Decode never panics, and what it accepts encodes to a record
// that decodes to the same entry.
func FuzzDecode(f *testing.F) {
	f.Add("cancel/emails/a", `{"v":1,"at":5}`, false)
	f.Add("pause/emails", `{"v":1,"paused":true,"at":5}`, false)
	f.Add("pause/emails", ``, true)
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
