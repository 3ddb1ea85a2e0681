package dlq

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
)

// TestLetterJSON: a dead letter's JSON keeps its headers in order with
// repeated keys, the payload in base64 (an empty one as ""), the failure
// time in UTC and leaves out what is unknown.
func TestLetterJSON(t *testing.T) {
	failed := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.FixedZone("x", 3600))
	l := Letter{Partition: 1, Offset: 7, Reason: ReasonFailed, Error: "no such user", Failed: failed,
		Task: onceq.Task{ID: "t1", Queue: "jobs", Attempt: 2, Key: []byte("k"),
			Headers: []onceq.Header{{Key: "b", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "b", Value: []byte("3")}}}}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, []Letter{l, {Task: onceq.Task{ID: "t2"}}}); err != nil {
		t.Fatal(err)
	}
	want := `{"id":"t1","queue":"jobs","partition":1,"offset":7,"attempt":2,"failed":"2026-01-02T02:04:05.006Z","reason":"failed","error":"no such user","headers":{"b":"1","a":"2","b":"3"},"key_base64":"aw==","payload_base64":""}
{"id":"t2","queue":"","partition":0,"offset":0,"attempt":0,"reason":"","error":"","headers":{},"payload_base64":""}
`
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

// TestQueueStatsJSON: by_reason is an object even when empty, and the
// times are left out when unknown.
func TestQueueStatsJSON(t *testing.T) {
	var s QueueStats
	s.Queue = "mail"
	b, err := json.Marshal(s)
	if err != nil || string(b) != `{"queue":"mail","dead_letters":0,"by_reason":{}}` {
		t.Fatalf("empty: %s %v", b, err)
	}
	at := time.Unix(10, 0)
	s.Add(Letter{Reason: ReasonExpired, Failed: at})
	b, err = json.Marshal(s)
	if err != nil || string(b) != `{"queue":"mail","dead_letters":1,"by_reason":{"expired":1},"oldest":"1970-01-01T00:00:10Z","newest":"1970-01-01T00:00:10Z"}` {
		t.Fatalf("one: %s %v", b, err)
	}
}

// TestWriteTable: the error text is cut at TableErrorWidth and a letter
// without an ID or failure time shows "-".
func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	long := strings.Repeat("e", TableErrorWidth+10)
	if err := WriteTable(&buf, []Letter{{Offset: 3, Reason: ReasonMalformed, Error: long}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") != "0/3 - 0 - malformed 0 "+long[:TableErrorWidth-3]+"..." {
		t.Fatalf("table:\n%s", buf.String())
	}
}
