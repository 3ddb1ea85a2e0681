package serve_test

import (
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve"
)

// TestLaneSameIDBlocksNoOtherQueue: on a lane, a job nobody consumes
// holds up no job of the same ID in another queue, of another namespace
// or of its own: shop's inbox?id=order-1 is handed out at once although
// other's inbox?id=order-1 (and shop's outbox?id=order-1), published
// before it on the same lane, are never consumed.
func TestLaneSameIDBlocksNoOtherQueue(t *testing.T) {
	a := start(t, serve.Lane("lmstfy"), serve.CreateQueues(1))
	shop, other := a.token("shop", false), a.token("other", false)
	for _, pub := range []struct{ path, tok string }{
		{"/api/other/inbox?id=order-1", other},
		{"/api/shop/outbox?id=order-1", shop},
		{"/api/shop/inbox?id=order-1", shop},
	} {
		if code, body := a.do("PUT", pub.path, pub.tok, "p"); code != 201 {
			t.Fatalf("publish %s: %d %v", pub.path, code, body)
		}
	}
	began := time.Now()
	code, jobs := consume(t, a, shop, "/api/shop/inbox?timeout=20&ttr=60")
	if code != 200 || len(jobs) != 1 || jobs[0].JobID != "order-1" {
		t.Fatalf("shop's consume of inbox after %v: %d %+v; want its order-1 at once", time.Since(began), code, jobs)
	}
	// The jobs of the same ID in the other queues are theirs still.
	for _, c := range []struct{ path, tok string }{{"/api/shop/outbox?timeout=20", shop}, {"/api/other/inbox?timeout=20", other}} {
		if code, jobs := consume(t, a, c.tok, c.path); code != 200 || len(jobs) != 1 || jobs[0].JobID != "order-1" {
			t.Fatalf("consume %s: %d %+v; want its own order-1", c.path, code, jobs)
		}
	}
}

// TestLaneJobInBacklog: on a lane of four partitions, a job waiting
// without a record (published without an ID) is found by its ID where
// its key (its queue and its ID) put it, and so is one keyed by its bare
// ID: the peek shows it, and a DELETE cancels it.
func TestLaneJobInBacklog(t *testing.T) {
	a := start(t, serve.Lane("lmstfy"), serve.CreateQueues(4))
	tok := a.token("shop", false)
	var ids []string
	for i := range 8 {
		code, body := a.do("PUT", "/api/shop/late", tok, fmt.Sprint("p-", i))
		if code != 201 {
			t.Fatalf("publish: %d %v", code, body)
		}
		ids = append(ids, body["job_id"].(string))
	}
	p, err := producer.New(producer.Conn(a.conn))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Submit(t.Context(), onceq.Task{ID: "bare-1", Queue: "lmstfy/shop.late", Key: []byte("bare-1"), Payload: []byte("p-bare")}); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, "bare-1")
	for i, id := range ids {
		want := fmt.Sprint("p-", i)
		if id == "bare-1" {
			want = "p-bare"
		}
		code, body := a.do("GET", "/api/shop/late/task/"+id, tok, "")
		if data, _ := body["data"].(string); code != 200 || data != base64.StdEncoding.EncodeToString([]byte(want)) {
			t.Errorf("peek of %s: %d %v; want it waiting with %s", id, code, body, want)
		}
	}
	for _, id := range []string{ids[0], "bare-1"} {
		if code, out := a.del("/api/shop/late/job/"+id, tok, ""); code != 204 || out != "canceled" {
			t.Errorf("DELETE of %s, waiting without a record: %d %s; want 204 canceled", id, code, out)
		}
	}
}
