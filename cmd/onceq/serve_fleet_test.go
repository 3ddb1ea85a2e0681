package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// TestServeFleetCrash: two `onceq serve` processes behind the test's own
// round robin, 2,000 jobs by default (ONCEQ_FLEET_TASKS sets it) in two
// namespaces of two queues each, where every queue holds the same job IDs
// (f-0, f-1, ...), and 6 consumers that take jobs from either server and
// acknowledge each through the other, while each server is SIGKILLed and
// restarted 3 times; once with a topic per queue and once with every
// queue a lane queue of one topic (--lane). About 5% of the hand-outs
// are acknowledged a second past their ttr (a late ACK, which answers at
// once) and 5% are never acknowledged (abandoned: the job comes back
// after its ttr). Every job ends succeeded once, in its own queue, with
// the result of an acknowledgment of that job; none is lost, none is held
// by two consumers at once or handed out again before its ttr, none after
// an acknowledgment answered 204 or 202; a late ACK answers within a
// second; and the queues hold at most 2 records of a job, plus one for
// each hand-out of it not acknowledged in time (each may leave a retry).
// ONCEQ_FLEET_SEED seeds the consumers' choices as a run printed it (the
// servers' timing is the run's own).
func TestServeFleetCrash(t *testing.T) {
	n := fleetTasksDefault
	if v := os.Getenv("ONCEQ_FLEET_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("ONCEQ_FLEET_TASKS=%q: want a number of jobs, 100 or more", v)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("ONCEQ_FLEET_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("ONCEQ_FLEET_SEED=%q: want the seed a run printed", v)
		}
	}
	for _, l := range []fleetLayout{{name: "topics"}, {name: "lane", lane: "lmstfy"}} {
		t.Run(l.name, func(t *testing.T) {
			t.Logf("ONCEQ_FLEET_SEED=%d", seed)
			f := startFleet(t, l, n, seed)
			f.run()
			f.check()
		})
	}
}

// fleetTasksDefault is the fleet's jobs per layout without
// ONCEQ_FLEET_TASKS: about a minute per layout on 2 shared cores.
const fleetTasksDefault = 2_000

// The consumers' terms: most consumes take a job for fleetTTR; a share
// (fleetMisbehave) take it for fleetShortTTR and then, for a job at most
// at attempt fleetMisbehaveAttempts, acknowledge it fleetLateAfter after
// they got it (late) or never (abandoned), half and half. The job has
// fleetTries: its misbehaved tries leave it enough.
const (
	fleetTTR               = 30 * time.Second
	fleetShortTTR          = 2 * time.Second
	fleetLateAfter         = 3 * time.Second
	fleetMisbehave         = 0.10
	fleetMisbehaveAttempts = 2
	fleetTries             = 5
	fleetConsumers         = 6
	fleetKills             = 6 // each server, in turn, 3 times
	// fleetLateAnswer bounds the late ACKs' answers at their p99, and
	// fleetLateMax each one: a machine whose cores are all busy (a killed
	// server restarting beside the broker) stalls a few for more than a
	// second, while an ACK blocked until the group's session times out
	// waits far longer than either.
	fleetLateAnswer = time.Second
	fleetLateMax    = 3 * time.Second
)

// The namespaces and their queues: each queue holds the same job IDs.
var (
	fleetNamespaces = [...]string{"shop", "mall"}
	fleetQueueNames = [...]string{"q1", "q2"}
)

// fleetLayout is how the servers keep the namespaces' queues: a topic
// each, or lane queues of the topic lane.
type fleetLayout struct {
	name string
	lane string // "": a topic per queue
}

// queue is the queue that holds namespace ns's queue q, as its records
// name it.
func (l fleetLayout) queue(ns, q string) string {
	if l.lane != "" {
		return l.lane + "/" + ns + "." + q
	}
	return ns + "." + q
}

// fleetJob names a job: its namespace, queue and ID.
type fleetJob struct{ ns, queue, id string }

func (j fleetJob) String() string { return j.ns + "/" + j.queue + "/" + j.id }

// behaviour is what a consumer does with a job it got.
type behaviour int

const (
	ackAtOnce behaviour = iota
	ackLate             // fleetLateAfter after it got it, past its ttr
	abandon             // never
)

// handout is one hand-out of a job to a consumer, and what became of it.
type handout struct {
	consumer        int
	asked, received time.Time
	ttr             time.Duration
	attempt         int
	lease           string
	does            behaviour
	result          string // what its ACK sends
	// The ACK's answer for good (code 0: none), and when the request
	// that got it was sent.
	code           int
	sent, answered time.Time
}

// late reports whether h's ACK was sent past its ttr by the consumer's
// clock: it may then find the job handed out again (409) or ended (204).
func (h *handout) late() bool { return h.does == ackLate }

// counted reports whether h's ACK answered that the job completes with
// h's result: 202, or 204 for an ACK in time.
func (h *handout) counted() bool { return h.code == 202 || h.code == 204 && !h.late() }

type fleetServer struct {
	args []string
	url  string // http://<listen>
	proc *testutil.Process
}

// fleet is one run: its servers, consumers, and what they saw.
type fleet struct {
	t        *testing.T
	layout   fleetLayout
	conn     broker.Conn
	seed     uint64
	perQueue int
	jobs     []fleetJob
	servers  [2]*fleetServer
	procMu   sync.Mutex // guards the servers' processes
	do       map[string]func(method, path, body string) (int, []byte, error)
	deadline time.Time
	start    time.Time
	wall     time.Duration
	kills    int
	killedAt []time.Time // when each kill was sent

	late    sync.WaitGroup // the late ACKs on their way
	stop    chan struct{}  // closed when the consumers may stop
	settled atomic.Int64   // jobs an ACK answered 202 or 204 for
	// lostAnswers counts the consumes whose answer did not arrive: each
	// may have taken a job no consumer got, whose ttr then passes.
	lostAnswers atomic.Int64

	mu          sync.Mutex
	handouts    map[fleetJob][]*handout
	settledJobs map[fleetJob]bool
}

// startFleet starts the broker and two servers of layout l, makes a token
// for each namespace, and publishes n jobs, spread over the queues.
func startFleet(t *testing.T, l fleetLayout, n int, seed uint64) *fleet {
	addr, conn := produceBroker(t)
	f := &fleet{t: t, layout: l, conn: conn, seed: seed, perQueue: n / (len(fleetNamespaces) * len(fleetQueueNames)),
		do: map[string]func(string, string, string) (int, []byte, error){}, stop: make(chan struct{}),
		handouts: map[fleetJob][]*handout{}, settledJobs: map[fleetJob]bool{}}
	cl := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for _, ns := range fleetNamespaces {
		code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", ns)
		if code != 0 {
			t.Fatalf("token create %s: %s", ns, stderr)
		}
		f.do[ns] = tokenRequests(cl, strings.TrimSpace(out), "")
		for _, q := range fleetQueueNames {
			for i := range f.perQueue {
				f.jobs = append(f.jobs, fleetJob{ns, q, "f-" + strconv.Itoa(i)})
			}
		}
	}
	for i := range f.servers {
		listen := testutil.FreeAddr(t)
		s := &fleetServer{args: []string{"serve", "--brokers", addr, "--listen", listen, "--data-dir", t.TempDir(), "--create-queues", "4"},
			url: "http://" + listen}
		if l.lane != "" {
			s.args = append(s.args, "--lane", l.lane)
		} else {
			s.args = append(s.args, "--topic-per-queue")
		}
		s.proc = testutil.Start(t, s.args...)
		f.servers[i] = s
	}
	t.Cleanup(func() {
		f.procMu.Lock()
		defer f.procMu.Unlock()
		for _, s := range f.servers {
			s.proc.Kill()
		}
	})
	for _, s := range f.servers {
		s.proc.WaitOutput(t, "serving", 30*time.Second)
	}
	// Bulk publishes of up to 500 jobs of one queue, to the servers in
	// turn.
	for i, b := 0, 0; i < len(f.jobs); b++ {
		var lines []string
		j := f.jobs[i]
		for ; i < len(f.jobs) && len(lines) < 500 && f.jobs[i].ns == j.ns && f.jobs[i].queue == j.queue; i++ {
			lines = append(lines, fmt.Sprintf(`{"id":%q,"payload":%q,"max_attempts":%d}`, f.jobs[i].id, f.jobs[i].String(), fleetTries))
		}
		url := f.servers[b%2].url + "/api/" + j.ns + "/" + j.queue + "/bulk"
		if code, body, err := f.do[j.ns]("POST", url, "["+strings.Join(lines, ",")+"]"); code != 201 {
			t.Fatalf("bulk: %d %s %v", code, body, err)
		}
	}
	return f
}

// run consumes every job while it kills each server, in turn, and
// restarts it; it returns once every job is acknowledged and the late
// ACKs' jobs ended.
func (f *fleet) run() {
	t := f.t
	f.start = time.Now()
	total := int64(len(f.jobs))
	f.deadline = f.start.Add(max(5*time.Minute, time.Duration(total)*100*time.Millisecond))
	var consumers sync.WaitGroup
	for c := range fleetConsumers {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			f.consume(c, rand.New(rand.NewPCG(f.seed, uint64(c))))
		}()
	}
	// Kill each server fleetKills/2 times, in turn, spread over the run.
	for k := range fleetKills {
		for time.Now().Before(f.deadline) && f.settled.Load() < total*int64(k+1)/(fleetKills+2) {
			time.Sleep(20 * time.Millisecond)
		}
		if !time.Now().Before(f.deadline) {
			break // stalled: the servers' logs are this run's
		}
		killed := time.Now()
		f.kill(k % 2)
		t.Logf("server %d killed at %v and restarted at %d of %d acknowledged", k%2, killed.Format(time.StampMilli), f.settled.Load(), total)
	}
	for time.Now().Before(f.deadline) && f.settled.Load() < total {
		time.Sleep(20 * time.Millisecond)
	}
	f.late.Wait()
	// A job a late ACK answered 202 for completes when its retry runs,
	// which the consumers' polls fetch: they poll until it did.
	f.awaitLateEnds()
	close(f.stop)
	consumers.Wait()
	f.wall = time.Since(f.start)
	if f.settled.Load() < total {
		for i, s := range f.servers {
			t.Logf("server %d's log:\n%s", i, lastBytes(s.proc.Output(), 8000))
		}
		for _, ns := range fleetNamespaces {
			for _, q := range fleetQueueNames {
				logOffsets(t, f.conn, onceq.QueueTopic(f.layout.queue(ns, q)), "onceq-serve")
			}
		}
	}
}

// kill SIGKILLs server i and restarts it.
func (f *fleet) kill(i int) {
	t := f.t
	s := f.servers[i]
	f.procMu.Lock()
	f.killedAt = append(f.killedAt, time.Now())
	s.proc.Signal(syscall.SIGKILL)
	if _, err := s.proc.Wait(10 * time.Second); err != nil {
		f.procMu.Unlock()
		t.Fatal(err)
	}
	f.kills++
	s.proc = testutil.Start(t, s.args...)
	f.procMu.Unlock()
	s.proc.WaitOutput(t, "serving", 30*time.Second)
}

// consume is consumer c: it takes jobs of its namespace's queues from the
// servers in turn, and acknowledges each through the other, late or never
// as rng decides, until the run stops.
func (f *fleet) consume(c int, rng *rand.Rand) {
	t := f.t
	ns := fleetNamespaces[c%len(fleetNamespaces)]
	do := f.do[ns]
	for i := c; time.Now().Before(f.deadline); i++ {
		select {
		case <-f.stop:
			return
		default:
		}
		queues := fleetQueueNames[:]
		if i%2 == 1 {
			queues = []string{fleetQueueNames[1], fleetQueueNames[0]}
		}
		ttr := fleetTTR
		short := rng.Float64() < fleetMisbehave
		if short {
			ttr = fleetShortTTR
		}
		asked := time.Now()
		url := fmt.Sprintf("%s/api/%s/%s?ttr=%d&timeout=1", f.servers[i%2].url, ns, strings.Join(queues, ","), int(ttr/time.Second))
		code, body, err := do("GET", url, "")
		if err != nil {
			f.lostAnswers.Add(1) // a take may have counted
		}
		if err != nil || code >= 500 || code == 404 {
			if err != nil || code >= 500 {
				time.Sleep(50 * time.Millisecond) // that server is down
			}
			continue
		}
		var got struct {
			ID        string `json:"job_id"`
			Namespace string
			Queue     string
			Data      []byte
			Attempt   int
			Lease     string
		}
		if code != 200 || json.Unmarshal(body, &got) != nil || got.Lease == "" {
			t.Errorf("consumer %d: consume: %d %s", c, code, body)
			return
		}
		j := fleetJob{got.Namespace, got.Queue, got.ID}
		if got.Namespace != ns || !strings.Contains(","+strings.Join(queues, ",")+",", ","+got.Queue+",") || string(got.Data) != j.String() {
			t.Errorf("consumer %d of %s/%s: got job %s of namespace %q, queue %q, with data %q: another queue's", c, ns, strings.Join(queues, ","),
				got.ID, got.Namespace, got.Queue, got.Data)
			continue
		}
		h := &handout{consumer: c, asked: asked, received: time.Now(), ttr: ttr, attempt: got.Attempt, lease: got.Lease}
		h.result = fmt.Sprintf("r-%s@%d/%s", j, c, h.lease)
		if short && got.Attempt <= fleetMisbehaveAttempts {
			h.does = ackLate
			if rng.IntN(2) == 0 {
				h.does = abandon
			}
		}
		f.mu.Lock()
		f.handouts[j] = append(f.handouts[j], h)
		f.mu.Unlock()
		switch h.does {
		case ackLate:
			f.late.Add(1)
			go func() {
				defer f.late.Done()
				// The consumer is late on purpose: its ACK goes past the
				// job's ttr, by the clock.
				time.Sleep(time.Until(h.received.Add(fleetLateAfter)))
				f.ack(c, j, h, i+1)
			}()
		case ackAtOnce:
			f.ack(c, j, h, i+1)
		}
	}
}

// ack acknowledges h's job with h's result through the servers in turn,
// from server next, until one answers for good: a server killed
// mid-answer leaves the job to the other. The answer is h's.
func (f *fleet) ack(c int, j fleetJob, h *handout, next int) {
	path := "/api/" + j.ns + "/" + j.queue + "/job/" + j.id + "?lease=" + h.lease
	for time.Now().Before(f.deadline) {
		s := f.servers[next%2]
		next++
		sent := time.Now()
		code, body, err := f.do[j.ns]("DELETE", s.url+path, h.result)
		if err != nil || code >= 500 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		answered := time.Now()
		f.mu.Lock()
		h.code, h.sent, h.answered = code, sent, answered
		if (code == 202 || code == 204) && !f.settledJobs[j] {
			f.settledJobs[j] = true
			f.settled.Add(1)
		}
		f.mu.Unlock()
		// Past its ttr (late, or in time by the consumer's clock but
		// not by the lease topic's), an ACK may find the job handed out
		// again: 409.
		if code != 202 && code != 204 && !(code == 409 && (h.late() || h.ttr == fleetShortTTR)) {
			f.t.Errorf("consumer %d: ACK of %s (attempt %d, ttr %v): %d %s", c, j, h.attempt, h.ttr, code, body)
		}
		return
	}
}

// awaitLateEnds waits until every job a late ACK answered 202 for ended,
// as a server's view of its record says.
func (f *fleet) awaitLateEnds() {
	f.mu.Lock()
	var pending []fleetJob
	for j, hs := range f.handouts {
		for _, h := range hs {
			if h.late() && h.code == 202 {
				pending = append(pending, j)
			}
		}
	}
	f.mu.Unlock()
	for i, j := range pending {
		for time.Now().Before(f.deadline) {
			url := fmt.Sprintf("%s/api/%s/%s/job/%s/wait?timeout=10", f.servers[i%2].url, j.ns, j.queue, j.id)
			code, body, err := f.do[j.ns]("GET", url, "")
			var rec struct{ Done bool }
			if err == nil && code == 200 && json.Unmarshal(body, &rec) == nil && rec.Done {
				break
			}
			if err != nil || code != 200 {
				time.Sleep(50 * time.Millisecond) // that server is down, or restarting
			}
		}
	}
}

// logOffsets logs, for a stalled run, each partition of topic's end, last
// stable offset and group's committed offset.
func logOffsets(t *testing.T, conn broker.Conn, topic, group string) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Log(err)
		return
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, _ := adm.Kadm().ListEndOffsets(ctx, topic)
	stables, _ := adm.Kadm().ListCommittedOffsets(ctx, topic)
	lags, err := adm.GroupLag(ctx, group)
	t.Logf("group lag: %+v (%v)", lags, err)
	ends.Each(func(o kadm.ListedOffset) {
		st, _ := stables.Lookup(o.Topic, o.Partition)
		t.Logf("%s/%d: end %d, last stable %d", o.Topic, o.Partition, o.Offset, st.Offset)
	})
}
