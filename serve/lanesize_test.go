package serve_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestSizeRetried: a job taken and not acknowledged within its ttr is
// retried, and its retry comes back to its queue as a copy, while its
// first record stays past the committed offset (behind a job handed out
// before it): the size counts the job once, where it counted every copy
// (2 for a queue of 1 job waiting).
func TestSizeRetried(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			testSizeRetried(t, l.opt, map[string]string{"topics": "ns.q", "lane": "lmstfy"}[l.name])
		})
	}
}

func testSizeRetried(t *testing.T, layout serve.Opt, topic string) {
	a := start(t, layout, serve.CreateQueues(1))
	c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}
	// held is handed out and not acknowledged: the records after it stay
	// past the committed offset. retried is handed out for a second, and
	// retried.
	var id string
	for _, j := range []struct {
		data  string
		ttr   uint64
		tries uint64
	}{{"held", 60, 1}, {"retried", 1, 3}} {
		id = c.publish("q", "", []byte(j.data), nil, 0, j.tries, 0)
		if got := c.consume([]string{"q"}, 0, j.ttr, 10, false); len(got) != 1 || got[0].ID != id {
			t.Fatalf("consume: %+v; want %s", got, id)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		copies := 0
		for _, r := range testutil.ReadCommitted(t, a.conn, 10*time.Second, topic) {
			if task, err := onceq.FromRecord(r); err == nil && task.ID == id {
				copies++
			}
		}
		if copies == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records of %s in %s a minute after its ttr; want 2, its retry back", copies, id, topic)
		}
	}
	code, body := a.do("GET", "/api/ns/q/task/"+id, c.token, "")
	if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "retrying" {
		t.Fatalf("the retried job: %d %v", code, body)
	}
	if n := c.size("q"); n != 1 {
		t.Errorf("size of a queue of 1 job waiting, retried once, and 1 handed out: %d", n)
	}
}

// TestLaneSizeLongBacklog: a lane whose backlog holds more records than a
// size used to read exactly (10,000) counts each queue's jobs exactly: a
// queue of one job published after the others, where the size, estimated
// from the first records read, said 0; and it follows the publishes and
// consumes after. So it does past the records a server keeps of its
// lane's backlog.
func TestLaneSizeLongBacklog(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep int
	}{{"kept", 0}, {"past what is kept", 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.keep > 0 {
				t.Cleanup(serve.SetMaxLaneIndex(tc.keep)) // after the server stops
			}
			testLaneSizeLongBacklog(t)
		})
	}
}

func testLaneSizeLongBacklog(t *testing.T) {
	const big = 11_000
	a := start(t, serve.Lane("lmstfy"), serve.CreateQueues(2))
	c := &lmstfyClient{t: t, a: a, ns: "ns", token: a.token("ns", false)}
	c.publish("first", "", []byte("first"), nil, 0, 1, 0)
	batch := make([]string, serve.MaxBulkJobs)
	for i := range batch {
		batch[i] = fmt.Sprint(i)
	}
	data := []byte("[" + strings.Join(batch, ",") + "]")
	q := url.Values{"ttl": {"0"}, "tries": {"1"}, "delay": {"0"}}
	for n := 0; n < big; n += len(batch) {
		if n+len(batch) > big {
			batch = batch[:big-n]
			data = []byte("[" + strings.Join(batch, ",") + "]")
		}
		code, raw := c.do("PUT", "big/bulk", q, data, nil)
		var out struct {
			JobIDs []string `json:"job_ids"`
		}
		if code != 201 || json.Unmarshal(raw, &out) != nil || len(out.JobIDs) != len(batch) {
			t.Fatalf("bulk publish: %d %s", code, raw)
		}
	}
	last := c.publish("last", "", []byte("last"), nil, 0, 1, 0)
	for queue, want := range map[string]int{"big": big, "first": 1, "last": 1, "never": 0} {
		if n := c.size(queue); n != want {
			t.Errorf("size of %s: %d; want %d", queue, n, want)
		}
	}
	// A consume of last takes its job: 0 left; another job published
	// after counts.
	if got := c.consume([]string{"last"}, 0, 60, 10, false); len(got) != 1 || got[0].ID != last {
		t.Fatalf("consume of last: %+v", got)
	}
	c.publish("first", "", []byte("second"), nil, 0, 1, 0)
	for queue, want := range map[string]int{"first": 2, "last": 0} {
		if n := c.size(queue); n != want {
			t.Errorf("size of %s after a consume of last and a publish to first: %d; want %d", queue, n, want)
		}
	}
	c.ack("last", last)
	if n := c.size("last"); n != 0 {
		t.Errorf("size of last after its ACK: %d", n)
	}
}
