package serve_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/serve"
)

// TestLeasesAcrossServers: a job handed out by one server is acknowledged
// through another, and after a restart of the one that handed it out: it
// completes once, with the acknowledged result, and is never handed out
// again while its lease is open.
func TestLeasesAcrossServers(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1))
		tok := a.token("shop", false)
		b := startOn(t, a.conn, layout)
		for _, id := range []string{"j-1", "j-2"} {
			if code, body := a.do("PUT", "/api/shop/mail?id="+id+"&tries=3", tok, "p-"+id); code != 201 {
				t.Fatalf("publish %s: %d %v", id, code, body)
			}
		}
		// Taken from a, acknowledged through b.
		j := consumeOne(t, a, tok, "/api/shop/mail?ttr=120&timeout=30")
		if j.Lease == "" {
			t.Fatalf("a job handed out without its lease: %+v", j)
		}
		if code, out := b.del("/api/shop/mail/job/"+j.JobID, tok, "done-by-b"); code != 204 || out != "acknowledged" {
			t.Fatalf("ACK of %s through the other server: %d %s; want 204 acknowledged", j.JobID, code, out)
		}
		assertResult(t, a, tok, "mail", j.JobID, "done-by-b", 1)

		// Taken from a, which restarts: its successor holds the job, does not
		// hand it out again, and takes its ACK.
		j2 := consumeOne(t, a, tok, "/api/shop/mail?ttr=120&timeout=30")
		a.close()
		a2 := startOn(t, a.conn, layout)
		if code, jobs := consume(t, a2, tok, "/api/shop/mail?ttr=120&timeout=3"); code != 404 {
			t.Fatalf("consume after the restart, while %s's lease is open: %d %+v; want 404", j2.JobID, code, jobs)
		}
		if code, out := a2.del("/api/shop/mail/job/"+j2.JobID, tok, "done-after-restart"); code != 204 || out != "acknowledged" {
			t.Fatalf("ACK of %s after the restart: %d %s; want 204 acknowledged", j2.JobID, code, out)
		}
		assertResult(t, b, tok, "mail", j2.JobID, "done-after-restart", 1)
		// A second ACK is idempotent, and the first result stays: it
		// finds the job acknowledged (its lease still known) or, once
		// the lease is forgotten, final (none).
		if code, out := b.del("/api/shop/mail/job/"+j2.JobID, tok, "again"); code != 204 || out != "acknowledged" && out != "none" {
			t.Fatalf("second ACK: %d %s; want 204 acknowledged or none", code, out)
		}
		assertResult(t, a2, tok, "mail", j2.JobID, "done-after-restart", 1)
	})
}

// TestLateAck: an ACK after the lease's time-to-run answers at once:
// 204 later for a job whose retry waits (in the delay topics, until a delay
// service runs), which the ACK completes when it runs (its queue fetched
// for a consumer), 409 for a job dead after its last try, which stays
// dead; and an ACK naming a lease that another consumer's take ended is
// refused.
func TestLateAck(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1), serve.DelayService(false))
		tok := a.token("shop", false)
		for _, id := range []string{"late", "named", "last"} {
			tries := map[bool]string{true: "1", false: "3"}[id == "last"]
			if code, body := a.do("PUT", "/api/shop/q?id="+id+"&tries="+tries, tok, "x"); code != 201 {
				t.Fatalf("publish: %d %v", code, body)
			}
		}
		byID := map[string]handedOut{}
		for range 3 {
			j := consumeOne(t, a, tok, "/api/shop/q?ttr=1&timeout=30")
			byID[j.JobID] = j
		}
		named := byID["named"]
		if len(byID) != 3 || named.JobID == "" {
			t.Fatalf("handed out %+v", byID)
		}
		// Past its ttr, "late" fails its first try; its ACK answers at once,
		// and completes it when its retry runs.
		waitState(t, a, tok, "q", "late", "retrying")
		if code, out, took := ackTimed(a, tok, "late", "late-result"); code != 204 || out != "later" || took > 10*time.Second {
			t.Fatalf("late ACK of a job whose retry waits: %d %s after %v; want 204 later at once", code, out, took)
		}
		// "last" is dead after its only try: its ACK is refused at once,
		// and it stays dead.
		waitState(t, a, tok, "q", "last", "dead")
		began := time.Now()
		if code, body := a.do("DELETE", "/api/shop/q/job/last", tok, "too-late"); code != 409 || !strings.Contains(fmt.Sprint(body["error"]), "ran out of tries") || time.Since(began) > 10*time.Second {
			t.Fatalf("late ACK of a dead job: %d %v after %v; want 409 at once", code, body, time.Since(began))
		}
		waitState(t, a, tok, "q", "last", "dead")
		runDelayService(t, a)

		// "named" is handed out again after its ttr: the first consumer's ACK
		// naming its lease is refused, the second's counts.
		waitState(t, a, tok, "q", "named", "retrying")
		again := consumeOne(t, a, tok, "/api/shop/q?ttr=120&timeout=30")
		if again.JobID != "named" || again.Lease == named.Lease || again.Attempt != 2 {
			t.Fatalf("handed out again: %+v (first %+v)", again, named)
		}
		if code, body := a.do("DELETE", "/api/shop/q/job/named?lease="+named.Lease, tok, "stale"); code != http.StatusConflict || body["field"] != "lease" {
			t.Fatalf("ACK naming an ended lease: %d %v; want 409", code, body)
		}
		if code, out := a.del("/api/shop/q/job/named?lease="+again.Lease, tok, "fresh"); code != 204 || out != "acknowledged" {
			t.Fatalf("ACK naming the open lease: %d %s; want 204 acknowledged", code, out)
		}
		assertResult(t, a, tok, "q", "named", "fresh", 2)
		// The consume fetched the queue: "late"'s retry ran, and took the
		// result of its ACK without being handed out.
		assertResult(t, a, tok, "q", "late", "late-result", 2)
	})
}

// TestLateAckWhileItsHolderIsDown: a job handed out by a server that
// stops before the job's ttr passes is held by nobody: no handler writes
// the expiry of its lease. An ACK after the ttr, through another server,
// is still a late one: it answers 202 at once, rather than counting in
// time and waiting for the job to run again wherever its partition goes;
// the run, when its queue is fetched, completes the job with the ACK's
// result.
func TestLateAckWhileItsHolderIsDown(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1), serve.DelayService(false))
		tok := a.token("shop", false)
		if code, body := a.do("PUT", "/api/shop/q?id=orphan&tries=3", tok, "x"); code != 201 {
			t.Fatalf("publish: %d %v", code, body)
		}
		// a alone owns the queue's topic before the consume: its
		// consumer's want stays its own, and no server fetches the queue
		// after a stops until something wants it.
		awaitOwned(t, a, "q")
		j := consumeOne(t, a, tok, "/api/shop/q?ttr=5&timeout=30")
		until := time.Now().Add(5 * time.Second)
		a.close()
		if time.Now().After(until) {
			t.Fatal("the server took longer than the job's ttr to stop")
		}
		b := startOn(t, a.conn, layout, serve.DelayService(false))
		// The consumer is late by the clock: that is the case.
		time.Sleep(time.Until(until.Add(200 * time.Millisecond)))
		start := time.Now()
		code, out := b.del("/api/shop/q/job/orphan?lease="+j.Lease, tok, "late-result")
		if took := time.Since(start); code != 204 || out != "later" || took > 5*time.Second {
			t.Fatalf("late ACK of a job whose server stopped: %d %s after %v; want 204 later at once", code, out, took)
		}
		// Consumes fetch the queue: the job's run takes the ACK's result,
		// and is not handed out.
		awaitRunWhileConsuming(t, b, tok, "q", "orphan")
		assertResult(t, b, tok, "q", "orphan", "late-result", 1)
	})
}

// TestAckOfJobWhoseRunWaits: after a restart, a job handed out before it
// runs again behind its queue's places (PullSlots) held by a job offered
// to consumers, so that its ACK cannot commit before a consumer takes
// that one. The ACK answers 204 later once it waited for the run a while (the
// pull group's session timeout; shortened here), rather than 504 after
// 30 s: its consumer goes on, takes the other job, and the run then comes
// and completes the job with the ACK's result.
func TestAckOfJobWhoseRunWaits(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1), serve.PullSlots(2))
		tok := a.token("shop", false)
		if code, body := a.do("PUT", "/api/shop/q?id=warm", tok, "x"); code != 201 {
			t.Fatalf("publish: %d %v", code, body)
		}
		awaitOwned(t, a, "q")
		// A consume keeps the queue fetched for a while after it.
		warm := consumeOne(t, a, tok, "/api/shop/q?ttr=60&timeout=30")
		if code, out := a.del("/api/shop/q/job/warm?lease="+warm.Lease, tok, ""); code != 204 || out != "acknowledged" {
			t.Fatalf("ACK of warm: %d %s; want 204 acknowledged", code, out)
		}
		for _, q := range []string{"id=first", "id=urgent&priority=9"} {
			if code, body := a.do("PUT", "/api/shop/q?tries=3&"+q, tok, "x"); code != 201 {
				t.Fatalf("publish %s: %d %v", q, code, body)
			}
		}
		// Both offered, the urgent one is handed out first.
		for deadline := time.Now().Add(time.Minute); serve.Offered(a.srv, "shop.q")+serve.Offered(a.srv, "lmstfy/shop.q") != 2; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the two jobs are not offered after a minute")
			}
		}
		j := consumeOne(t, a, tok, "/api/shop/q?ttr=60&timeout=30")
		if j.JobID != "urgent" {
			t.Fatalf("handed out %s; want urgent", j.JobID)
		}
		a.close()
		// b runs one job of the queue at a time: first, offered, holds
		// the place; urgent waits behind it.
		b := startOn(t, a.conn, layout, serve.PullSlots(1), serve.AckRunWait(2*time.Second))
		start := time.Now()
		if code, out := b.del("/api/shop/q/job/urgent?lease="+j.Lease, tok, "urgent-result"); code != 204 || out != "later" || time.Since(start) > 20*time.Second {
			t.Fatalf("ACK of a job whose run waits for a place: %d %s after %v; want 204 later after the run's wait", code, out, time.Since(start))
		}
		first := consumeOne(t, b, tok, "/api/shop/q?ttr=60&timeout=30")
		if first.JobID != "first" {
			t.Fatalf("handed out %s after urgent's ACK; want first", first.JobID)
		}
		if code, out := b.del("/api/shop/q/job/first?lease="+first.Lease, tok, "first-result"); code != 204 || out != "acknowledged" {
			t.Fatalf("ACK of first: %d %s; want 204 acknowledged", code, out)
		}
		assertResult(t, b, tok, "q", "first", "first-result", 1)
		assertResult(t, b, tok, "q", "urgent", "urgent-result", 1)
	})
}

// awaitRunWhileConsuming consumes queue q of namespace shop on a, a
// second at a time, none of its jobs handed out, until job id is final:
// a run of it waits for its queue to be fetched, which a consumer's want
// does, however long its partitions take to reach a.
func awaitRunWhileConsuming(t *testing.T, a *api, tok, q, id string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if code, jobs := consume(t, a, tok, "/api/shop/"+q+"?ttr=30&timeout=1"); code != 404 {
			t.Fatalf("consume while %s waits for its run: %d %+v; want 404", id, code, jobs)
		}
		code, body := a.do("GET", "/api/shop/"+q+"/task/"+id, tok, "")
		if code == 200 && body["done"] == true {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not done after 2 minutes of consumes: %d %v", id, code, body)
		}
	}
}

// awaitOwned waits until a's pull worker owns the topic of namespace
// shop's queue q, in either layout (the lane lmstfy, or shop.q).
func awaitOwned(t *testing.T, a *api, q string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !serve.Owns(a.srv, "shop."+q) && !serve.Owns(a.srv, "lmstfy/shop."+q); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server does not own queue %s's topic after a minute", q)
		}
	}
}

// TestAckOfCanceledJob: a job canceled while handed out stays canceled,
// and its consumer's ACK answers 204: it is final, and an ACK is
// idempotent.
func TestAckOfCanceledJob(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	if code, body := a.do("PUT", "/api/shop/q?id=c-1&tries=3", tok, "x"); code != 201 {
		t.Fatalf("publish: %d %v", code, body)
	}
	consumeOne(t, a, tok, "/api/shop/q?ttr=60&timeout=30")
	if code, body := a.do("POST", "/api/shop/q/job/c-1/cancel", tok, ""); code != 200 && code != 202 {
		t.Fatalf("cancel of a job handed out: %d %v", code, body)
	}
	waitState(t, a, tok, "q", "c-1", "canceled")
	if code, body, took := ackTimed(a, tok, "c-1", "r"); code != 204 || took > 10*time.Second {
		t.Fatalf("ACK of a canceled job: %d %v after %v; want 204 at once", code, body, took)
	}
	waitState(t, a, tok, "q", "c-1", "canceled")
}

// runDelayService runs a delay service on a's broker until the test ends.
func runDelayService(t *testing.T, a *api) {
	t.Helper()
	ds, err := delay.NewService(delay.Conn(a.conn), delay.StateDir(t.TempDir()), delay.CommitInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ds.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("delay service: %v", err)
		}
	})
}

// ackTimed acknowledges job id of queue q with result, and says how long
// the answer took.
func ackTimed(a *api, tok, id, result string) (int, string, time.Duration) {
	start := time.Now()
	code, out := a.del("/api/shop/q/job/"+id, tok, result)
	return code, out, time.Since(start)
}

// consumeOne consumes one job, failing the test if none comes.
func consumeOne(t *testing.T, a *api, tok, path string) handedOut {
	t.Helper()
	code, jobs := consume(t, a, tok, path)
	if code != 200 || len(jobs) != 1 {
		t.Fatalf("consume %s: %d %+v", path, code, jobs)
	}
	return jobs[0]
}

// assertResult checks that id succeeded with result at attempt.
func assertResult(t *testing.T, a *api, tok, queue, id, result string, attempt int) {
	t.Helper()
	code, body := a.do("GET", "/api/shop/"+queue+"/job/"+id+"/wait?timeout=30", tok, "")
	task, _ := body["task"].(map[string]any)
	if code != 200 || task["state"] != "succeeded" || task["result"] != base64.StdEncoding.EncodeToString([]byte(result)) || task["attempt"] != float64(attempt) {
		t.Fatalf("%s: %d %v; want succeeded with %q at attempt %d", id, code, body, result, attempt)
	}
}

// waitState polls id's record until it is in state.
func waitState(t *testing.T, a *api, tok, queue, id, state string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := a.do("GET", "/api/shop/"+queue+"/task/"+id, tok, "")
		task, _ := body["task"].(map[string]any)
		if code == 200 && task["state"] == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never %s: %d %v", id, state, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConsumeFromEitherServer: a queue of one partition belongs to one
// server of the pull group, yet consumers of both servers get its jobs:
// the owner grants them to the other server's consumers.
func TestConsumeFromEitherServer(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1))
		tok := a.token("shop", false)
		b := startOn(t, a.conn, layout)
		for i := range 4 {
			if code, body := a.do("PUT", "/api/shop/one?tries=3", tok, "x"); code != 201 {
				t.Fatalf("publish %d: %d %v", i, code, body)
			}
		}
		seen := map[string]bool{}
		for _, srv := range []*api{a, b, a, b} {
			j := consumeOne(t, srv, tok, "/api/shop/one?ttr=60&timeout=30")
			if seen[j.JobID] {
				t.Fatalf("%s handed out twice", j.JobID)
			}
			seen[j.JobID] = true
			if code, out := srv.del("/api/shop/one/job/"+j.JobID+"?lease="+j.Lease, tok, "r"); code != 204 || out != "acknowledged" {
				t.Fatalf("ACK of %s: %d %s; want 204 acknowledged", j.JobID, code, out)
			}
		}
	})
}

// TestDeleteOfOfferedJob: a DELETE of a job that a server offers to its
// consumers (its run started, no consumer took it yet), sent to another
// server, cancels it, and once it answered no consume through either
// server gets the job: its cancel in the lease topic comes before any
// take, while the control topic's cancel may reach the worker running it
// much later (on a loaded Kafka cluster, after the next consume).
func TestDeleteOfOfferedJob(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(1))
		b := startOn(t, a.conn, layout)
		tok := a.token("shop", false)
		for _, id := range []string{"first", "second"} {
			if code, body := a.do("PUT", "/api/shop/offered?id="+id, tok, "x"); code != 201 {
				t.Fatalf("publish %s: %d %v", id, code, body)
			}
		}
		taken := consumeOne(t, a, tok, "/api/shop/offered?ttr=60&timeout=30").JobID
		other := map[string]string{"first": "second", "second": "first"}[taken]
		waitOffered(t, a, serve.QueueOf(a.srv, "shop", "offered"), 1)
		if code, outcome := b.del("/api/shop/offered/job/"+other, tok, ""); code != 204 || outcome != "canceled" {
			t.Fatalf("DELETE of the offered job %s through the other server: %d %q; want 204 canceled", other, code, outcome)
		}
		for _, s := range []*api{a, b} {
			if code, jobs := consume(t, s, tok, "/api/shop/offered?ttr=60&timeout=1"); code != 404 {
				t.Fatalf("consume after the DELETE of %s: %d %+v; want 404", other, code, jobs)
			}
		}
		code, body := a.do("GET", "/api/shop/offered/job/"+other+"/wait?timeout=30", tok, "")
		if task, _ := body["task"].(map[string]any); code != 200 || task["state"] != "canceled" {
			t.Fatalf("%s after its DELETE: %d %v; want canceled", other, code, body)
		}
	})
}
