package serve_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/serve"
)

// TestServerHoldsManyHandedOut: one server hands out, and holds until
// their ACK or ttr, 5,000 jobs of 100 lane queues at once, more than the
// 4,096 its pull worker used to run at most: past those, every consume
// of any queue or namespace answered 404 until a held job ended. And 500
// jobs of one queue, where a queue's jobs handed out used to keep their
// places of --pull-slots (64): its 65th consume answered 404 with 436
// jobs waiting, until an ACK.
func TestServerHoldsManyHandedOut(t *testing.T) {
	a := start(t, serve.Lane("lmstfy"), serve.CreateQueues(4))
	tok := a.token("shop", false)
	began := time.Now()
	n := handOutAll(t, a, tok, 100, 50)
	t.Logf("%d jobs of 100 queues handed out and held at once in %v", n, time.Since(began).Round(time.Millisecond))
	began = time.Now()
	n = handOutAll(t, a, tok, 1, 500)
	t.Logf("%d jobs of one queue handed out and held at once in %v", n, time.Since(began).Round(time.Millisecond))
}

// handOutAll publishes each jobs to each of queues new queues of the
// namespace of tok, consumes them all without an ACK (ttr 600 s), and
// returns how many were handed out, each once.
func handOutAll(t *testing.T, a *api, tok string, queues, each int) int {
	t.Helper()
	ns := fmt.Sprintf("q%dx%d-", queues, each)
	for q := range queues {
		var b strings.Builder
		b.WriteByte('[')
		for i := range each {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"id":"j-%d","payload":"p"}`, i)
		}
		b.WriteByte(']')
		if code, body := a.do("POST", fmt.Sprintf("/api/shop/%s%d/bulk", ns, q), tok, b.String()); code != 201 {
			t.Fatalf("bulk publish to %s%d: %d %v", ns, q, code, body)
		}
	}
	held := map[string]bool{}
	for q := range queues {
		for got := 0; got < each; {
			code, jobs := consume(t, a, tok, fmt.Sprintf("/api/shop/%s%d?count=%d&ttr=600&timeout=30", ns, q, min(each-got, serve.MaxCount)))
			if code != 200 {
				t.Fatalf("consume of %s%d with %d jobs of its %d handed out, %d in all: %d; want the queue's jobs", ns, q, got, each, len(held), code)
			}
			for _, j := range jobs {
				k := fmt.Sprintf("%d/%s", q, j.JobID)
				if held[k] {
					t.Fatalf("%s handed out twice within its ttr", k)
				}
				held[k] = true
			}
			got += len(jobs)
		}
	}
	if len(held) != queues*each {
		t.Fatalf("%d jobs handed out; want %d", len(held), queues*each)
	}
	return len(held)
}
