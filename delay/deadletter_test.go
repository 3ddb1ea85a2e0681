package delay_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/dlq"
	"github.com/onceq/onceq/internal/testutil"
)

// TestBadRecordsAreDeadLettered writes records that are not valid delayed
// tasks straight into a bucket, as any Kafka client could. Each ends in a
// dead-letter topic, encoded as a worker's dead letters are (issue 17, bug
// 10: the delay service wrote "delay: ..." without onceq-failed): a reason
// dlq.Decode knows, the text, and the failure time. The valid one next to
// them is published as usual.
func TestBadRecordsAreDeadLettered(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	p := shortLadder(t)
	createQueue(t, conn, "q", 1)
	runService(t, delay.Conn(conn), delay.WithPlanner(p), delay.Logger(testLogger()))
	waitForTopic(t, conn, p.Topics()[0])

	start := time.Now()
	due := strconv.FormatInt(time.Now().Add(300*time.Millisecond).UnixMilli(), 10)
	h := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	bucket := p.Topics()[0]
	recs := []*kgo.Record{
		{Key: []byte("no-queue"), Headers: h(onceq.HeaderID, "no-queue", onceq.HeaderDue, due)},
		{Key: []byte("no-due"), Headers: h(onceq.HeaderID, "no-due", onceq.HeaderQueue, "q")},
		{Key: []byte("bad-due"), Headers: h(onceq.HeaderID, "bad-due", onceq.HeaderQueue, "q", onceq.HeaderDue, "soon")},
		{Key: []byte("bad-attempt"), Headers: h(onceq.HeaderID, "bad-attempt", onceq.HeaderQueue, "q", onceq.HeaderDue, due, onceq.HeaderAttempt, "0")},
		{Key: []byte("no-such-queue"), Headers: h(onceq.HeaderID, "no-such-queue", onceq.HeaderQueue, "nosuchq", onceq.HeaderDue, due)},
		{Key: []byte("typo"), Headers: h(onceq.HeaderID, "typo", onceq.HeaderQueue, "q", onceq.HeaderDue, due, "onceq-delay", "5s")},
		{Key: []byte("old-error"), Headers: h(onceq.HeaderID, "old-error", onceq.HeaderQueue, "q", onceq.HeaderDue, due, onceq.HeaderAttempt, "x",
			onceq.HeaderError, "max_attempts: earlier", onceq.HeaderFailed, "1")},
		{Key: []byte("good"), Value: []byte("payload"), Headers: h(onceq.HeaderID, "good", onceq.HeaderQueue, "q", onceq.HeaderDue, due, "trace", "t1")},
	}
	cl, err := conn.NewClient(kgo.DefaultProduceTopic(bucket))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	want := map[string]struct{ topic, reason, text string }{
		"no-queue":      {"onceq-dlq-" + bucket, dlq.ReasonMalformed, "no onceq-queue header"},
		"no-due":        {"onceq-dlq-q", dlq.ReasonMalformed, "onceq-due"},
		"bad-due":       {"onceq-dlq-q", dlq.ReasonMalformed, "onceq-due"},
		"bad-attempt":   {"onceq-dlq-q", dlq.ReasonMalformed, "onceq-attempt"},
		"no-such-queue": {"onceq-dlq-nosuchq", dlq.ReasonNoQueue, `queue "nosuchq" does not exist`},
		"typo":          {"onceq-dlq-q", dlq.ReasonMalformed, `header "onceq-delay": malformed header`},
		"old-error":     {"onceq-dlq-q", dlq.ReasonMalformed, "onceq-attempt"},
		"good":          {"q", "", ""},
	}
	topics := []string{"q", "onceq-dlq-q", "onceq-dlq-" + bucket, "onceq-dlq-nosuchq"}
	var got []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		got = got[:0]
		for _, tp := range topics {
			if rs, err := testutil.ReadCommittedErr(conn, 10*time.Second, tp); err == nil {
				got = append(got, rs...)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records in %v, want %d", len(got), topics, len(want))
	}
	for _, r := range got {
		id := string(r.Key)
		w, ok := want[id]
		if !ok || r.Topic != w.topic {
			t.Errorf("record %s in %s, want it in %s", id, r.Topic, w.topic)
			continue
		}
		var reason string
		for _, hd := range r.Headers {
			if hd.Key == onceq.HeaderError {
				reason = string(hd.Value)
			}
		}
		if w.reason == "" {
			task, err := onceq.FromRecord(r)
			if err != nil || reason != "" || string(task.Payload) != "payload" || len(task.Headers) != 1 || task.Headers[0].Key != "trace" {
				t.Errorf("published %s: %+v, %v, error %q", id, task, err, reason)
			}
			if r.Timestamp.UnixMilli() < task.Due.UnixMilli() {
				t.Errorf("published %s early", id)
			}
			continue
		}
		l := dlq.Decode(r, "q")
		if l.Reason != w.reason || !strings.Contains(l.Error, w.text) || l.Failed.Before(start.Truncate(time.Millisecond)) || l.Failed.After(time.Now()) {
			t.Errorf("dead letter %s: reason %q, error %q, failed %v; want reason %q, an error mentioning %q and the failure time",
				id, l.Reason, l.Error, l.Failed, w.reason, w.text)
		}
		n := 0
		for _, hd := range r.Headers {
			if hd.Key == onceq.HeaderError || hd.Key == onceq.HeaderFailed {
				n++
			}
		}
		if n != 2 {
			t.Errorf("dead letter %s has %d onceq-error and onceq-failed headers, want one each", id, n)
		}
	}
}

// waitForTopic waits until the service has created a topic.
func waitForTopic(t *testing.T, conn broker.Conn, topic string) {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := adm.DescribeTopic(context.Background(), topic); err == nil {
			return
		}
	}
	t.Fatalf("topic %s was not created", topic)
}
