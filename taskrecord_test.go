package onceq

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTaskRecordRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, r := range []TaskRecord{
		{ID: "a", Queue: "q", State: StateSucceeded, Attempt: 1, Enqueued: at, Started: at.Add(time.Second), Finished: at.Add(2 * time.Second),
			Worker: "w-1", Partition: 3, Offset: 1042, Result: []byte("ok\x00\xff")},
		{ID: "b", Queue: "q", State: StateRetrying, Attempt: 2, MaxAttempts: 5, Priority: 9, Due: at, Error: "boom: \"quoted\"\n\ttab \x01 \u2028 é", Result: nil},
		{ID: "c", Queue: "q", State: StateDead, Reason: "max_attempts", Error: "bad \xff utf-8", Result: []byte{}},
		{ID: "q/0/7", Queue: "q", State: StateCanceled},
	} {
		v := r.AppendJSON(nil)
		if !json.Valid(v) {
			t.Fatalf("%s: invalid JSON: %s", r.ID, v)
		}
		got, err := DecodeTaskRecord(v)
		if err != nil {
			t.Fatalf("%s: %v (%s)", r.ID, err, v)
		}
		want := r
		want.Error = strings.ToValidUTF8(r.Error, "\ufffd")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: round trip:\n got %+v\nwant %+v\n(%s)", r.ID, got, want, v)
		}
	}
}

// TestTaskRecordJSONIsStandard checks the hand-written encoder against
// encoding/json: any JSON reader sees the same strings.
func TestTaskRecordJSONIsStandard(t *testing.T) {
	for _, s := range []string{"", "plain", "\"\\/", "\x00\x1f\x7f", "\u2028\u2029", "\xff\xfe", "日本"} {
		got := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", s, got, err)
		}
		std, _ := json.Marshal(s)
		var want string
		if err := json.Unmarshal(std, &want); err != nil {
			t.Fatal(err)
		}
		if back != want {
			t.Errorf("%q: read back %q, want %q", s, back, want)
		}
	}
}

func TestDecodeTaskRecordRefuses(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`{"v":2,"id":"a","queue":"q","state":"dead"}`, "version 2"},
		{`{"v":1,"id":"a","queue":"q","state":"done"}`, `task state "done"`},
		{`{"v":1,"id":"","queue":"q","state":"dead"}`, "invalid task ID"},
		{`{"v":1,"id":"a","queue":"","state":"dead"}`, "invalid queue"},
		{`{"v":1,"id":"a","queue":"q","state":"dead","attempt":-1}`, "whole numbers"},
		{`{"v":1,"id":"a","queue":"q","state":"dead","due":-5}`, "due -5"},
		{`{"v":1,"id":"a","queue":"q","state":"dead","priority":10}`, `task record of "a": priority 10: want 0 (the default, the lowest) to 9 (the highest)`},
		{`{"v":1,"id":"a","queue":"q","state":"dead","priority":-1}`, "priority -1"},
		{`{"v":1,"id":"a","queue":"q","state":"dead","priority":"5"}`, "task record"},
		{`{"v":1,"id":"a","queue":"q","state":"dead","result":"%%"}`, "not base64"},
		{`[1]`, "task record"},
		{``, "task record"},
	} {
		_, err := DecodeTaskRecord([]byte(tc.value))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to say %q", tc.value, err, tc.want)
		}
	}
}

func TestTaskStates(t *testing.T) {
	final := map[TaskState]bool{StateSucceeded: true, StateDead: true, StateExpired: true, StateCanceled: true}
	for _, s := range TaskStates {
		if s.Final() != final[s] {
			t.Errorf("%s.Final() = %v", s, s.Final())
		}
		if got, err := ParseTaskState(string(s)); err != nil || got != s {
			t.Errorf("ParseTaskState(%s) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseTaskState("Succeeded"); err == nil {
		t.Error("ParseTaskState accepted a misspelt state")
	}
}

// FuzzDecodeTaskRecord decodes arbitrary values: it never panics, and what
// it accepts encodes to a value that decodes to the same record.
func FuzzDecodeTaskRecord(f *testing.F) {
	f.Add([]byte(`{"v":1,"id":"a","queue":"q","state":"succeeded","attempt":1,"enqueued":1,"result":"b2s="}`))
	f.Add([]byte(`{"v":1,"id":"a","queue":"q","state":"retrying","due":1700000000000,"error":"x\ny"}`))
	f.Add([]byte(`{"v":1,"id":"a","queue":"q","state":"dead","reason":"failed","partition":2,"offset":9}`))
	f.Add([]byte(`{"v":1,"id":"a","queue":"q","state":"succeeded","attempt":01}`))
	f.Add([]byte(`{"v":1,"id":"é","queue":"q","state":"dead","error":"x\u2028"}`))
	f.Add([]byte(`{"v":1,"id":"a","queue":"q","state":"succeeded","attempt":1,"max_attempts":3,"priority":9,"enqueued":1}`))
	f.Add([]byte(`{"v":1,"id":"a","queue":"q","state":"succeeded","priority":10}`))
	f.Add([]byte(`{"v":1,"id":"a","queue":"q","state":"succeeded","priority":0}`))
	f.Add([]byte(`{"v":1,"id":"a","queue":"q","state":"succeeded","enqueued":1,"priority":4}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		if fast, ok := decodeCanonical(value); ok {
			var slow taskRecordJSON
			if err := json.Unmarshal(value, &slow); err != nil {
				t.Fatalf("the fast path read what encoding/json refuses (%v): %s", err, value)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("the fast path read %+v, encoding/json %+v: %s", fast, slow, value)
			}
		}
		r, err := DecodeTaskRecord(value)
		if err != nil {
			return
		}
		again := r.AppendJSON(nil)
		back, err := DecodeTaskRecord(again)
		if err != nil {
			t.Fatalf("re-encoded %s: %v", again, err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", r, back)
		}
	})
}

func TestDecodeTaskRecords(t *testing.T) {
	a := TaskRecord{ID: "a", Queue: "q", State: StateSucceeded, Attempt: 1, Result: []byte("x")}
	b := TaskRecord{ID: "b", Queue: "q", State: StateDead, Reason: "failed", Error: "line\nbreak"}
	value := append(append(a.AppendJSON(nil), '\n'), b.AppendJSON(nil)...)
	got, err := DecodeTaskRecords(append(value, '\n', '\n'))
	if err != nil || len(got) != 2 || !reflect.DeepEqual(got[0], a) || !reflect.DeepEqual(got[1], b) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if got, err := DecodeTaskRecords(nil); err != nil || len(got) != 0 {
		t.Fatalf("empty value: %+v, %v", got, err)
	}
	_, err = DecodeTaskRecords(append(append(a.AppendJSON(nil), '\n'), `{"v":1}`...))
	if err == nil || !strings.HasPrefix(err.Error(), "line 2: ") {
		t.Fatalf("a bad second line: %v, want it named", err)
	}
}

// FuzzDecodeTaskRecords: a value of lines decodes to what the lines
// decode to one by one, and never panics.
func FuzzDecodeTaskRecords(f *testing.F) {
	f.Add([]byte("{\"v\":1,\"id\":\"a\",\"queue\":\"q\",\"state\":\"dead\"}\n{\"v\":1,\"id\":\"b\",\"queue\":\"q\",\"state\":\"pending\"}"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, value []byte) {
		rs, err := DecodeTaskRecords(value)
		if err != nil {
			return
		}
		var again []byte
		for i := range rs {
			again = append(rs[i].AppendJSON(again), '\n')
		}
		back, err := DecodeTaskRecords(again)
		if err != nil || !reflect.DeepEqual(back, rs) {
			t.Fatalf("re-encoded lines: %v\n%+v\n%+v", err, rs, back)
		}
	})
}

// TestCanonicalIsTheFastPath: what AppendJSON writes without escapes is
// read by the fast path, to the same record as encoding/json reads it.
func TestCanonicalIsTheFastPath(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, r := range []TaskRecord{
		{ID: "a", Queue: "q", State: StateSucceeded, Attempt: 1, MaxAttempts: 5, Priority: MaxPriority, Enqueued: at, Started: at, Finished: at, Due: at,
			Worker: "w", Reason: "r", Error: "plain é", Partition: 2147483647, Offset: 1 << 40, Result: []byte{0, 1}},
		{ID: "q/0/7", Queue: "q", State: StatePending},
	} {
		v := r.AppendJSON(nil)
		fast, ok := decodeCanonical(v)
		if !ok {
			t.Fatalf("not on the fast path: %s", v)
		}
		var slow taskRecordJSON
		if err := json.Unmarshal(v, &slow); err != nil || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast %+v, slow %+v (%v)", fast, slow, err)
		}
	}
	for _, v := range []string{
		`{"v":1,"id":"a","queue":"q","state":"dead","error":"a\nb"}`,
		`{"v":1,"id":"a","queue":"q","state":"dead","attempt":01}`,
		`{"v":1, "id":"a","queue":"q","state":"dead"}`,
		`{"v":1,"id":"a","queue":"q","state":"dead","offset":1,"partition":2}`,
		`{"v":1,"id":"a","queue":"q","state":"dead","priority":10}`,
		`{"v":1,"id":"a","queue":"q","state":"dead","enqueued":1,"priority":4}`,
	} {
		if _, ok := decodeCanonical([]byte(v)); ok {
			t.Errorf("the fast path read %s", v)
		}
	}
}

// TestTaskRecordWithoutPriority: a record written before priorities
// existed, without the field, decodes as priority 0 on either path, and
// a record of priority 0 is written without it, as those were.
func TestTaskRecordWithoutPriority(t *testing.T) {
	for _, v := range []string{
		`{"v":1,"id":"a","queue":"q","state":"succeeded","attempt":1,"max_attempts":3,"enqueued":1700000000000,"partition":3,"offset":1042}`,
		`{"v":1, "id":"a","queue":"q","state":"succeeded","attempt":1,"max_attempts":3,"enqueued":1700000000000,"partition":3,"offset":1042}`,
	} {
		r, err := DecodeTaskRecord([]byte(v))
		if err != nil || r.Priority != 0 || r.MaxAttempts != 3 || r.Offset != 1042 {
			t.Fatalf("%s: %+v, %v; want priority 0", v, r, err)
		}
		if again := r.AppendJSON(nil); strings.Contains(string(again), "priority") {
			t.Fatalf("a record of priority 0 written as %s", again)
		}
	}
	r := TaskRecord{ID: "a", Queue: "q", State: StateSucceeded, Priority: 5}
	if v := string(r.AppendJSON(nil)); !strings.Contains(v, `,"priority":5`) {
		t.Fatalf("a record of priority 5 written as %s", v)
	}
}
