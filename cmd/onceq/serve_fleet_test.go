package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
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
// round robin, 2,000 jobs (ONCEQ_FLEET_TASKS sets it) and 6 consumers
// that take jobs from either server and acknowledge each through the
// other, while each server is SIGKILLed and restarted 3 times. Every job
// ends succeeded with the result its consumer sent, none canceled, none
// lost, and no job is held by two consumers at once: a job handed out
// again was handed out after the earlier lease's time-to-run, and never
// after an acknowledgment answered 204.
func TestServeFleetCrash(t *testing.T) {
	n := 2_000
	if v := os.Getenv("ONCEQ_FLEET_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			t.Fatalf("ONCEQ_FLEET_TASKS=%q: want a number of jobs, 100 or more", v)
		}
	}
	const ttr = 30 * time.Second
	addr, conn := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop")
	if code != 0 {
		t.Fatalf("token create: %s", stderr)
	}
	tok := strings.TrimSpace(out)
	type server struct {
		args []string
		base string
		proc *testutil.Process
	}
	var servers [2]*server
	for i := range servers {
		listen := testutil.FreeAddr(t)
		s := &server{args: []string{"serve", "--brokers", addr, "--listen", listen, "--data-dir", t.TempDir(), "--create-queues", "4"},
			base: "http://" + listen + "/api/shop/jobs"}
		s.proc = testutil.Start(t, s.args...)
		servers[i] = s
	}
	var procMu sync.Mutex // guards the servers' processes
	defer func() {
		procMu.Lock()
		defer procMu.Unlock()
		for _, s := range servers {
			s.proc.Kill()
		}
	}()
	for _, s := range servers {
		s.proc.WaitOutput(t, "serving", 30*time.Second)
	}
	cl := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	do := tokenRequests(cl, tok, "")
	for i := 0; i < n; i += 500 {
		var lines []string
		for j := i; j < min(i+500, n); j++ {
			lines = append(lines, fmt.Sprintf(`{"id":"f-%d","payload":"%d","max_attempts":5}`, j, j))
		}
		if code, body, err := do("POST", servers[i/500%2].base+"/bulk", "["+strings.Join(lines, ",")+"]"); code != 201 {
			t.Fatalf("bulk: %d %s %v", code, body, err)
		}
	}

	type handout struct {
		consumer        int
		asked, received time.Time
		acked           time.Time // when an ACK of it answered 204
		lease           string
	}
	var mu sync.Mutex
	handouts := map[string][]*handout{}
	acked := map[string]bool{}
	var settled atomic.Int64
	deadline := time.Now().Add(max(5*time.Minute, time.Duration(n)*100*time.Millisecond))
	// ack acknowledges through the servers in turn until one answers for
	// good: a server killed mid-answer leaves the job to the other.
	ack := func(c int, id string, h *handout, next int) bool {
		for time.Now().Before(deadline) {
			s := servers[next%2]
			next++
			code, body, err := do("DELETE", s.base+"/job/"+id+"?lease="+h.lease, "r-"+id)
			switch {
			case err != nil || code >= 500:
				time.Sleep(50 * time.Millisecond)
				continue
			case code == 204 || code == 202:
				// 202: after the ttr; its retry completes it with this
				// result, not handed out again.
				mu.Lock()
				if code == 204 {
					h.acked = time.Now()
				}
				if !acked[id] {
					acked[id] = true
					settled.Add(1)
				}
				mu.Unlock()
				return true
			default:
				t.Errorf("consumer %d: ACK of %s: %d %s", c, id, code, body)
				return false
			}
		}
		return false
	}
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; time.Now().Before(deadline) && settled.Load() < int64(n); i++ {
				asked := time.Now()
				code, body, err := do("GET", servers[i%2].base+"?ttr="+strconv.Itoa(int(ttr/time.Second))+"&timeout=1", "")
				if err != nil || code >= 500 || code == 404 {
					if err != nil || code >= 500 {
						time.Sleep(50 * time.Millisecond) // that server is down
					}
					continue
				}
				var j struct {
					ID    string `json:"job_id"`
					Lease string
				}
				if code != 200 || json.Unmarshal(body, &j) != nil || j.Lease == "" {
					t.Errorf("consumer %d: consume: %d %s", c, code, body)
					return
				}
				h := &handout{consumer: c, asked: asked, received: time.Now(), lease: j.Lease}
				mu.Lock()
				handouts[j.ID] = append(handouts[j.ID], h)
				mu.Unlock()
				if !ack(c, j.ID, h, i+1) {
					return
				}
			}
		}()
	}
	// Kill each server 3 times, in turn, spread over the run.
	kills := 0
	for k := range 6 {
		for time.Now().Before(deadline) && settled.Load() < int64(n*(k+1)/8) {
			time.Sleep(20 * time.Millisecond)
		}
		s := servers[k%2]
		procMu.Lock()
		s.proc.Signal(syscall.SIGKILL)
		if _, err := s.proc.Wait(10 * time.Second); err != nil {
			procMu.Unlock()
			t.Fatal(err)
		}
		kills++
		s.proc = testutil.Start(t, s.args...)
		procMu.Unlock()
		s.proc.WaitOutput(t, "serving", 30*time.Second)
		t.Logf("server %d killed and restarted at %d of %d acknowledged", k%2, settled.Load(), n)
	}
	wg.Wait()
	if kills != 6 {
		t.Fatalf("%d kills; want 6", kills)
	}
	if settled.Load() < int64(n) {
		for i, s := range servers {
			t.Logf("server %d's log:\n%s", i, lastBytes(s.proc.Output(), 8000))
		}
		logOffsets(t, conn, "shop.jobs", "onceq-serve")
	}

	// The records: every job succeeded with its consumer's result.
	// A job's records may sit in several partitions (the producer's
	// pending one, the workers'): its final one is the one to read.
	last := map[string]onceq.TaskRecord{}
	finals := map[string]int{}
	for _, r := range testutil.ReadCommitted(t, conn, 60*time.Second, "onceq-rec-shop.jobs") {
		recs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.State.Final() {
				finals[rec.ID]++
			}
			if old, ok := last[rec.ID]; !ok || !old.State.Final() {
				last[rec.ID] = rec
			}
		}
	}
	var lost, canceled, twice, again int
	for i := range n {
		id := fmt.Sprintf("f-%d", i)
		rec, ok := last[id]
		switch {
		case !ok || rec.State != onceq.StateSucceeded:
			lost++
			if rec.State == onceq.StateCanceled {
				canceled++
			}
			if lost <= 5 {
				t.Errorf("%s: record %+v (found %v); want succeeded", id, rec, ok)
			}
		case string(rec.Result) != "r-"+id:
			t.Errorf("%s succeeded with %q; want its consumer's result", id, rec.Result)
		case finals[id] != 1:
			t.Errorf("%s has %d final records; want 1", id, finals[id])
		}
		hs := handouts[id]
		slices.SortFunc(hs, func(a, b *handout) int { return a.received.Compare(b.received) })
		for k := 1; k < len(hs); k++ {
			prev, h := hs[k-1], hs[k]
			switch {
			case !prev.acked.IsZero() && h.received.After(prev.acked):
				again++
				t.Errorf("%s handed out to consumer %d after consumer %d's ACK answered 204", id, h.consumer, prev.consumer)
			case h.received.Before(prev.asked.Add(ttr)):
				twice++
				t.Errorf("%s handed out to consumer %d at %v, within consumer %d's lease (asked %v, ttr %v)", id, h.consumer,
					h.received.Format(time.StampMilli), prev.consumer, prev.asked.Format(time.StampMilli), ttr)
			}
		}
	}
	t.Logf("%d jobs, 2 servers, %d kills: %d lost, %d canceled, %d held by two at once, %d handed out after their ACK", n, kills, lost, canceled, twice, again)
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
