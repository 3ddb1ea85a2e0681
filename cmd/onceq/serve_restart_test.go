package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// serveProc is an `onceq serve` process of a test, with what restarts it.
type serveProc struct {
	args    []string
	base    string // the API's URL
	dataDir string
	proc    *testutil.Process
}

// startServe starts `onceq serve` on the broker at addr with a data dir of
// its own and extra flags, and waits until it serves.
func startServe(t *testing.T, addr string, extra ...string) *serveProc {
	t.Helper()
	listen, dir := testutil.FreeAddr(t), t.TempDir()
	s := &serveProc{args: append([]string{"serve", "--brokers", addr, "--listen", listen, "--data-dir", dir, "--topic-per-queue"}, extra...),
		base: "http://" + listen, dataDir: dir}
	s.proc = testutil.Start(t, s.args...)
	s.proc.WaitOutput(t, "serving", 60*time.Second)
	return s
}

// kill SIGKILLs the process and starts it again on the same address and
// data dir, as a supervisor does.
func (s *serveProc) kill(t *testing.T) {
	t.Helper()
	s.proc.Signal(syscall.SIGKILL)
	if _, err := s.proc.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.proc = testutil.Start(t, s.args...)
	s.proc.WaitOutput(t, "serving", 60*time.Second)
}

// instance is the instance ID of the server's pull worker, kept in its
// data dir: its name in the pull group.
func (s *serveProc) instance(t *testing.T) string {
	t.Helper()
	path := filepath.Join(s.dataDir, "pull", "instance-id")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if id := strings.TrimSpace(string(b)); err == nil && id != "" {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("no instance ID in %s: %v", path, err)
		}
	}
}

// member is a member of the pull group: its member ID and the
// partitions of a topic it is assigned.
type member struct {
	id         string
	partitions []int32
}

// members returns the members of the pull group by instance ID, with the
// partitions of topic each is assigned.
func members(t *testing.T, conn broker.Conn, topic string) map[string]member {
	t.Helper()
	cl, err := conn.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, serve.DefaultPullGroup)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]member{}
	for _, m := range gs[serve.DefaultPullGroup].Members {
		if m.InstanceID == nil {
			continue
		}
		got := member{id: m.MemberID}
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range c.Topics {
				if tp.Topic == topic {
					got.partitions = append(got.partitions, tp.Partitions...)
				}
			}
		}
		out[*m.InstanceID] = got
	}
	return out
}

// waitMembers waits until ok accepts the pull group's members, and
// returns them.
func waitMembers(t *testing.T, conn broker.Conn, topic string, ok func(map[string]member) bool) map[string]member {
	t.Helper()
	var got map[string]member
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got = members(t, conn, topic); ok(got) {
			return got
		}
	}
	t.Fatalf("the pull group's members (assigned partitions of %s): %v", topic, got)
	return nil
}

// onePartitionEach accepts a group of the instances ids, each assigned
// one partition of the topic.
func onePartitionEach(ids ...string) func(map[string]member) bool {
	return func(ms map[string]member) bool {
		for _, id := range ids {
			if len(ms[id].partitions) != 1 {
				return false
			}
		}
		return len(ms) == len(ids)
	}
}

// TestServeRestartServesWaitingConsumers: a consumer long-polls server
// b; server a, which owns one of the queue's two partitions, is
// SIGKILLed and restarted, and a job is published to the partition the
// restarted server owns. The restarted server read b's want in the lease
// topic at its start, so it fetches the queue and hands the job to b's
// consumer at once, where it used to leave the partition unfetched for
// the whole long poll (404 after 40 s).
func TestServeRestartServesWaitingConsumers(t *testing.T) {
	addr, conn := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	tok := strings.TrimSpace(out)
	cl := &http.Client{Timeout: 90 * time.Second}
	do := tokenRequests(cl, tok, "")

	a := startServe(t, addr, "--create-queues", "2")
	if code, body, err := do("PUT", a.base+"/api/shop/jobs?id=warm", "w"); code != 201 { // the queue exists
		t.Fatalf("publish: %d %s %v", code, body, err)
	}
	b := startServe(t, addr)
	waitMembers(t, conn, "shop.jobs", onePartitionEach(a.instance(t), b.instance(t)))
	// b tells the group of its consumers' wants once it counted the
	// group's members (every few seconds): until then, and until the warm
	// job is consumed and acknowledged (else the long poll would get it),
	// consumes that end at once. Then the long poll, whose want is later.
	for warm := false; !warm || wantedUntil(t, conn, "shop.jobs").IsZero(); {
		code, body, err := do("GET", b.base+"/api/shop/jobs?timeout=1", "")
		switch {
		case code == 200:
			if code, body, err := do("DELETE", b.base+"/api/shop/jobs/job/warm", ""); code != 204 {
				t.Fatalf("ACK of the warm job: %d %s %v", code, body, err)
			}
			warm = true
		case code != 404:
			t.Fatalf("consume: %d %s %v", code, body, err)
		}
	}
	type answer struct {
		code int
		body []byte
		at   time.Time
	}
	got := make(chan answer, 1)
	polled := time.Now()
	go func() {
		code, body, _ := do("GET", b.base+"/api/shop/jobs?timeout=40&ttr=60", "")
		got <- answer{code, body, time.Now()}
	}()
	for wantedUntil(t, conn, "shop.jobs").Before(polled.Add(40 * time.Second)) {
		time.Sleep(50 * time.Millisecond)
	}

	before := members(t, conn, "shop.jobs")[a.instance(t)].id
	a.kill(t)
	// a rejoins as the static member it was: a new member ID, and one of
	// the two partitions once the group settled.
	ms := waitMembers(t, conn, "shop.jobs", func(ms map[string]member) bool {
		return onePartitionEach(a.instance(t), b.instance(t))(ms) && ms[a.instance(t)].id != before
	})
	p := ms[a.instance(t)].partitions[0]
	id := ""
	for i := 0; id == ""; i++ {
		c := "after-" + strconv.Itoa(i)
		if broker.KeyPartitioner().ForTopic("shop.jobs").Partition(&kgo.Record{Key: []byte(c)}, 2) == int(p) {
			id = c
		}
	}
	published := time.Now()
	if code, body, err := do("PUT", a.base+"/api/shop/jobs?id="+id, "x"); code != 201 {
		t.Fatalf("publish after the restart: %d %s %v", code, body, err)
	}
	ans := <-got
	var j struct {
		ID string `json:"job_id"`
	}
	if ans.code != 200 || json.Unmarshal(ans.body, &j) != nil || j.ID != id {
		t.Fatalf("b's consumer, waiting since before a's restart: %d %s %v after the publish to partition %d; want %s", ans.code, ans.body,
			ans.at.Sub(published).Round(time.Millisecond), p, id)
	}
	took := ans.at.Sub(published)
	t.Logf("the job published after the restart reached the consumer waiting on the other server in %v", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("the job took %v to reach the waiting consumer; want it promptly", took)
	}
}

// wantedUntil returns the latest end of the wants of topic in the pull
// group's lease topic (zero: none).
func wantedUntil(t *testing.T, conn broker.Conn, topic string) time.Time {
	t.Helper()
	var until time.Time
	for _, r := range testutil.ReadCommitted(t, conn, 10*time.Second, broker.LeasesTopic(serve.DefaultPullGroup)) {
		var v struct {
			Until int64 `json:"until"`
		}
		if strings.HasPrefix(string(r.Key), "\x01want\x00"+topic+"\x00") && json.Unmarshal(r.Value, &v) == nil && time.UnixMilli(v.Until).After(until) {
			until = time.UnixMilli(v.Until)
		}
	}
	return until
}

// TestServeDataDirOfAnotherPullGroup: onceq serve on a data dir whose
// pull worker checkpoint belongs to another pull group (what moving a
// server to a pull group of its own looks like) exits 2 at its start,
// naming the group the data dir belongs to and what to do, where it used
// to answer publishes with a pull worker that never ran (consumes 404
// forever, /healthz 200).
func TestServeDataDirOfAnotherPullGroup(t *testing.T) {
	addr, _ := produceBroker(t)
	first := startServe(t, addr, "--pull-group", "first")
	first.instance(t) // its checkpoint is made
	first.proc.Signal(syscall.SIGTERM)
	if code, err := first.proc.Wait(60 * time.Second); err != nil || code != 0 {
		t.Fatalf("stopping the first server: exit %d, %v\n%s", code, err, first.proc.Output())
	}
	args := append(slices.Clone(first.args), "--pull-group", "second")
	began := time.Now()
	p := testutil.Start(t, args...)
	code, err := p.Wait(60 * time.Second)
	if err != nil {
		t.Fatalf("onceq serve on the data dir of another pull group: %v; output:\n%s", err, lastBytes(p.Output(), 4000))
	}
	out := p.Output()
	for _, want := range []string{first.dataDir, `pull group "first"`, "--pull-group first", `pull group "second"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the error does not name %q:\n%s", want, out)
		}
	}
	if code != 2 {
		t.Errorf("exit %d; want 2 (bad input)", code)
	}
	t.Logf("refused in %v: %s", time.Since(began).Round(time.Millisecond), lastBytes(strings.TrimSpace(out), 400))
}

// TestServeCrashFreesLimitPlaces: on a queue limited to 2 running, a
// server is SIGKILLed twice with 2 jobs handed out (ttr 3 s), and
// restarted. The dead server's places free once those jobs' ttr and a
// grace of seconds end, and the restarted server hands jobs out again,
// where they used to hold for 24 h (the pull worker's task timeout, and
// past the jobs' default ttl). Every job ends acknowledged.
func TestServeCrashFreesLimitPlaces(t *testing.T) {
	addr, _ := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	tok := strings.TrimSpace(out)
	do := tokenRequests(&http.Client{Timeout: 90 * time.Second}, tok, "")
	a := startServe(t, addr)
	if code, body, err := do("PUT", a.base+"/api/shop/jobs/limit?running=2", ""); code != 200 {
		t.Fatalf("PUT limit: %d %s %v", code, body, err)
	}
	const n = 8
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"id":"l-%d","payload":"%d","max_attempts":10}`, i, i))
	}
	if code, body, err := do("POST", a.base+"/api/shop/jobs/bulk", "["+strings.Join(lines, ",")+"]"); code != 201 {
		t.Fatalf("bulk: %d %s %v", code, body, err)
	}
	// handOut takes one job for 3 s, waiting up to wait.
	handOut := func(wait time.Duration) bool {
		for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
			code, body, err := do("GET", a.base+"/api/shop/jobs?ttr=3&timeout=5", "")
			switch {
			case code == 200:
				return true
			case code != 404 && code != 502 && code != 503 && err == nil:
				t.Fatalf("consume: %d %s", code, body)
			}
		}
		return false
	}
	// running is how many jobs the limit holds handed out now.
	running := func() float64 {
		code, body, err := do("GET", a.base+"/api/shop/jobs/limit", "")
		var l struct {
			Running float64 `json:"running_now"`
		}
		if code != 200 || json.Unmarshal(body, &l) != nil {
			t.Fatalf("GET limit: %d %s %v", code, body, err)
		}
		return l.Running
	}
	for kill := 1; kill <= 2; kill++ {
		// Two jobs out, taken together: both places are held at the kill.
		for deadline := time.Now().Add(time.Minute); running() != 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: the places taken before are still held a minute later", kill)
			}
		}
		for range 2 {
			if !handOut(30 * time.Second) {
				t.Fatalf("kill %d: no job handed out under the limit", kill)
			}
		}
		if n := running(); n != 2 {
			t.Fatalf("kill %d: %v jobs running under the limit with two handed out", kill, n)
		}
		killed := time.Now()
		a.kill(t)
		if !handOut(60 * time.Second) {
			_, body, _ := do("GET", a.base+"/api/shop/jobs/limit", "")
			t.Fatalf("no job handed out in the 60 s after kill %d: the dead server's places still hold (%s)", kill, body)
		}
		t.Logf("kill %d: a job handed out again %v after the kill", kill, time.Since(killed).Round(time.Millisecond))
	}
	// The jobs whose ttr passed run again: every one is acknowledged.
	acked := map[string]bool{}
	for deadline := time.Now().Add(3 * time.Minute); len(acked) < n && time.Now().Before(deadline); {
		code, body, err := do("GET", a.base+"/api/shop/jobs?ttr=60&timeout=5", "")
		if code != 200 {
			if code != 404 {
				t.Fatalf("consume: %d %s %v", code, body, err)
			}
			continue
		}
		var j struct {
			ID string `json:"job_id"`
		}
		if err := json.Unmarshal(body, &j); err != nil {
			t.Fatal(err)
		}
		if code, body, err := do("DELETE", a.base+"/api/shop/jobs/job/"+j.ID, "done"); code != 204 {
			t.Fatalf("ACK of %s: %d %s %v", j.ID, code, body, err)
		}
		acked[j.ID] = true
	}
	if len(acked) != n {
		t.Fatalf("%d of %d jobs acknowledged: %v", len(acked), n, acked)
	}
}

// TestServeMovesTopicPerQueueJobs: a deployment of onceq serve with a
// topic per queue holds 1,000 jobs waiting when it stops; it starts again
// with the default layout, a lane, on the same data dir. The jobs move to
// their lane queue as the consumers ask for the queue: each is consumed
// once, and none after.
func TestServeMovesTopicPerQueueJobs(t *testing.T) {
	addr, _ := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	do := tokenRequests(&http.Client{Timeout: 90 * time.Second}, strings.TrimSpace(out), "")
	old := startServe(t, addr, "--create-queues", "4") // --topic-per-queue
	const n = 1000
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"id":"m-%d","payload":"%d"}`, i, i))
	}
	if code, body, err := do("POST", old.base+"/api/shop/jobs/bulk", "["+strings.Join(lines, ",")+"]"); code != 201 {
		t.Fatalf("bulk: %d %s %v", code, body, err)
	}
	old.proc.Signal(syscall.SIGTERM)
	if code, err := old.proc.Wait(60 * time.Second); err != nil || code != 0 {
		t.Fatalf("stopping the server: exit %d, %v\n%s", code, err, old.proc.Output())
	}
	args := slices.DeleteFunc(slices.Clone(old.args), func(a string) bool { return a == "--topic-per-queue" })
	p := testutil.Start(t, args...)
	p.WaitOutput(t, "serving", 60*time.Second)
	seen := map[string]int{}
	for len(seen) < n {
		code, body, err := do("GET", old.base+"/api/shop/jobs?count=100&ttr=60&timeout=10", "")
		if code != 200 {
			t.Fatalf("consume after %d of %d jobs: %d %s %v", len(seen), n, code, body, err)
		}
		var jobs []struct {
			ID   string `json:"job_id"`
			Data []byte `json:"data"`
		}
		if err := json.Unmarshal(body, &jobs); err != nil {
			t.Fatalf("consume: %s: %v", body, err)
		}
		for _, j := range jobs {
			if seen[j.ID]++; seen[j.ID] > 1 || "m-"+string(j.Data) != j.ID {
				t.Fatalf("job %s (data %q) handed out %d times", j.ID, j.Data, seen[j.ID])
			}
			if code, body, err := do("DELETE", old.base+"/api/shop/jobs/job/"+j.ID, "done"); code != 204 {
				t.Fatalf("ACK of %s: %d %s %v", j.ID, code, body, err)
			}
		}
	}
	if code, body, _ := do("GET", old.base+"/api/shop/jobs?timeout=1", ""); code != 404 {
		t.Fatalf("consume after every job: %d %s; want 404", code, body)
	}
}
