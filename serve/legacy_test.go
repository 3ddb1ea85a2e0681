package serve_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// TestLaneServesTopicPerQueueJobs: a server with a topic per queue holds
// 1,000 jobs waiting and one handed out when it stops; a server with a
// lane starts in its place. The handed-out job's ACK through it counts,
// and the waiting jobs move to the lane queue when a consumer asks for
// the queue: each is consumed once, with its data and the tries it had
// left, and none after. A job published then goes to the lane.
func TestLaneServesTopicPerQueueJobs(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	a := startOn(t, conn, serve.Lane(""), serve.CreateQueues(2))
	tok := a.token("ns", false)
	c := &lmstfyClient{t: t, a: a, ns: "ns", token: tok}
	const jobs = 1000
	want := map[string]string{}
	for i := range jobs {
		data := fmt.Sprintf("job-%d", i)
		want[c.publish("jobs", "", []byte(data), nil, 0, 3, 0)] = data
	}
	held := c.consume([]string{"jobs"}, 1, 60, 10, false)
	if len(held) != 1 {
		t.Fatalf("consume: %+v; want one job", held)
	}
	delete(want, held[0].ID)
	a.close()

	b := startOn(t, conn, serve.Lane("serve"), serve.CreateQueues(2))
	c.a = b
	c.ack("jobs", held[0].ID)
	seen := map[string]bool{}
	for len(seen) < len(want) {
		got := c.consume([]string{"jobs"}, 100, 60, 10, false)
		if len(got) == 0 {
			t.Fatalf("consume: none, %d of %d jobs consumed", len(seen), len(want))
		}
		for _, j := range got {
			data, ok := want[j.ID]
			switch {
			case j.ID == held[0].ID:
				t.Fatalf("job %s, acknowledged, handed out again", j.ID)
			case !ok || seen[j.ID]:
				t.Fatalf("job %s: published %v, consumed before %v", j.ID, ok, seen[j.ID])
			case string(j.Data) != data || j.RemainTries != 2 || j.Queue != "jobs":
				t.Fatalf("job %s: data %q, %d tries left, queue %s; want %q, 2, jobs", j.ID, j.Data, j.RemainTries, j.Queue, data)
			}
			seen[j.ID] = true
			c.ack("jobs", j.ID)
		}
	}
	if got := c.consume([]string{"jobs"}, 1, 60, 1, false); len(got) != 0 {
		t.Fatalf("consume after every job: %+v; want none", got)
	}
	id := c.publish("jobs", "", []byte("new"), nil, 0, 1, 0)
	if got := c.consume([]string{"jobs"}, 1, 60, 10, false); len(got) != 1 || got[0].ID != id {
		t.Fatalf("consume of the job published to the lane: %+v; want %s", got, id)
	}
	// The lane holds the jobs moved and the new one.
	if n := len(testutil.ReadCommitted(t, conn, 10*time.Second, "serve")); n != len(want)+1 {
		t.Errorf("the lane holds %d records, want %d", n, len(want)+1)
	}
}
