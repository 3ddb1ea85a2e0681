package serve_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/onceq/onceq/serve"
)

// TestLimitEndpoints: PUT sets a queue's limit, GET reads it, DELETE
// lifts it; bad values answer 400 naming the parameter and write
// nothing; a read-only token cannot set one; a namespace's limit is its
// own queue's.
func TestLimitEndpoints(t *testing.T) {
	a := start(t)
	tok := a.token("shop", false)
	ro := a.token("shop", true)
	other := a.token("mail", false)
	for _, tc := range []struct{ query, field string }{
		{"", "rate"},
		{"rate=10", "rate"},
		{"rate=10/fortnight", "rate"},
		{"rate=0/s", "rate"},
		{"running=0", "running"},
		{"running=x", "running"},
		{"running=2000000", "running"},
		{"rate=10/s&colour=red", ""},
	} {
		code, body := a.do("PUT", "/api/shop/pay/limit?"+tc.query, tok, "")
		if code != 400 || (tc.field != "" && body["field"] != tc.field) {
			t.Errorf("PUT limit?%s: %d %v; want 400 naming %q", tc.query, code, body, tc.field)
		}
	}
	if code, body := a.do("GET", "/api/shop/pay/limit", tok, ""); code != 200 || body["rate"] != nil || body["running"] != nil {
		t.Fatalf("a refused PUT set a limit: %d %v", code, body)
	}
	if code, body := a.do("PUT", "/api/shop/pay/limit?rate=10/s&running=5", ro, ""); code != 403 {
		t.Fatalf("PUT with a read-only token: %d %v", code, body)
	}
	if code, body := a.do("PUT", "/api/shop/pay/limit?rate=10/s&running=5", tok, ""); code != 200 || body["rate"] != "10/s" || body["running"] != 5.0 {
		t.Fatalf("PUT limit: %d %v", code, body)
	}
	if code, body := a.do("GET", "/api/shop/pay/limit", ro, ""); code != 200 || body["rate"] != "10/s" || body["running"] != 5.0 || body["queue"] != "pay" || body["running_now"] != 0.0 {
		t.Fatalf("GET limit: %d %v", code, body)
	}
	if code, body := a.do("GET", "/api/mail/pay/limit", other, ""); code != 200 || body["rate"] != nil {
		t.Fatalf("another namespace's queue of the same name: %d %v", code, body)
	}
	if code, body := a.do("PUT", "/api/shop/pay/limit?running=2", tok, ""); code != 200 || body["rate"] != nil || body["running"] != 2.0 {
		t.Fatalf("PUT replacing the limit: %d %v", code, body)
	}
	if code, body := a.do("DELETE", "/api/shop/pay/limit", tok, ""); code != 200 {
		t.Fatalf("DELETE limit: %d %v", code, body)
	}
	if code, body := a.do("GET", "/api/shop/pay/limit", tok, ""); code != 200 || body["running"] != nil {
		t.Fatalf("GET after DELETE: %d %v", code, body)
	}
}

// TestLimitHoldsHandOuts: on a queue HTTP consumers pull, a limit of one
// running counts the jobs handed out and not yet acknowledged: a second
// consumer gets nothing while the first holds its job, and gets the
// next one once that job is acknowledged.
func TestLimitHoldsHandOuts(t *testing.T) {
	a := start(t, serve.CreateQueues(2))
	tok := a.token("shop", false)
	if code, body := a.do("PUT", "/api/shop/jobs/limit?running=1", tok, ""); code != 200 {
		t.Fatalf("PUT limit: %d %v", code, body)
	}
	for i := range 2 {
		if code, body := a.do("PUT", "/api/shop/jobs?tries=3", tok, "job-"+strconv.Itoa(i)); code != 201 {
			t.Fatalf("publish %d: %d %v", i, code, body)
		}
	}
	first := consumeOne(t, a, tok, "/api/shop/jobs?ttr=60&timeout=30")
	if code, jobs := consume(t, a, tok, "/api/shop/jobs?ttr=60&timeout=3"); code != 404 {
		t.Fatalf("a second job handed out while the first is held under running=1: %d %+v", code, jobs)
	}
	if code, body := a.do("GET", "/api/shop/jobs/limit", tok, ""); code != 200 || body["running_now"] != 1.0 {
		t.Fatalf("the limit while a job is held: %d %v; want 1 running now", code, body)
	}
	got := make(chan handedOut, 1)
	go func() { got <- consumeOne(t, a, tok, "/api/shop/jobs?ttr=60&timeout=30") }()
	if code, out := a.del("/api/shop/jobs/job/"+first.JobID+"?lease="+first.Lease, tok, "done"); code != 204 || out != "acknowledged" {
		t.Fatalf("ACK: %d %s; want 204 acknowledged", code, out)
	}
	second := <-got
	if second.JobID == first.JobID {
		t.Fatalf("%s handed out twice", first.JobID)
	}
	if code, out := a.del("/api/shop/jobs/job/"+second.JobID+"?lease="+second.Lease, tok, "done"); code != 204 || out != "acknowledged" {
		t.Fatalf("ACK: %d %s; want 204 acknowledged", code, out)
	}
	// Both released: none runs now.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := a.do("GET", "/api/shop/jobs/limit", tok, "")
		if code == 200 && body["running_now"] == 0.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the limit after both ACKs: %d %v; want 0 running now", code, body)
		}
	}
}

// TestLimitWaitingJobHoldsNoPlace: under running=1, a job that waits
// for a consumer holds no place, and a hand-out holds its place only
// while it is out. Once the first job is acknowledged, with no consumer
// waiting, the queue runs none, though its second job was fetched and
// waits; a consumer then gets it, and its place counts.
// The worker used to claim the place before its handler offered the job,
// so a job nobody consumed held it for its queue's release time (30 s
// past the last consume).
func TestLimitWaitingJobHoldsNoPlace(t *testing.T) {
	a := start(t, serve.CreateQueues(1))
	tok := a.token("shop", false)
	if code, body := a.do("PUT", "/api/shop/jobs/limit?running=1", tok, ""); code != 200 {
		t.Fatalf("PUT limit: %d %v", code, body)
	}
	for i := range 2 {
		if code, body := a.do("PUT", "/api/shop/jobs?tries=3&id=j-"+strconv.Itoa(i), tok, "job"); code != 201 {
			t.Fatalf("publish %d: %d %v", i, code, body)
		}
	}
	first := consumeOne(t, a, tok, "/api/shop/jobs?ttr=60&timeout=30")
	running := func() any {
		code, body := a.do("GET", "/api/shop/jobs/limit", tok, "")
		if code != 200 {
			t.Fatalf("GET limit: %d %v", code, body)
		}
		return body["running_now"]
	}
	if n := running(); n != 1.0 {
		t.Fatalf("running_now with a job out: %v; want 1", n)
	}
	if code, out := a.del("/api/shop/jobs/job/"+first.JobID+"?lease="+first.Lease, tok, "done"); code != 204 || out != "acknowledged" {
		t.Fatalf("ACK: %d %s; want 204 acknowledged", code, out)
	}
	acked := time.Now()
	for n := running(); n != 0.0; n = running() {
		if time.Since(acked) > 10*time.Second {
			t.Fatalf("running_now %v 10s after the only job out was acknowledged, no consumer waiting; want 0", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the place freed %v after the ACK", time.Since(acked).Round(time.Millisecond))
	second := consumeOne(t, a, tok, "/api/shop/jobs?ttr=60&timeout=30")
	if second.JobID == first.JobID {
		t.Fatalf("%s handed out twice", first.JobID)
	}
	if n := running(); n != 1.0 {
		t.Fatalf("running_now with the second job out: %v; want 1", n)
	}
}
