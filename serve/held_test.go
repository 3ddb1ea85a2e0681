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
// of any queue or namespace answered 404 until a held job ended.
func TestServerHoldsManyHandedOut(t *testing.T) {
	const queues, each = 100, 50
	a := start(t, serve.Lane("lmstfy"), serve.CreateQueues(4))
	tok := a.token("shop", false)
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
		if code, body := a.do("POST", fmt.Sprintf("/api/shop/q%d/bulk", q), tok, b.String()); code != 201 {
			t.Fatalf("bulk publish to q%d: %d %v", q, code, body)
		}
	}
	began := time.Now()
	held := map[string]bool{}
	for q := range queues {
		for got := 0; got < each; {
			code, jobs := consume(t, a, tok, fmt.Sprintf("/api/shop/q%d?count=%d&ttr=600&timeout=30", q, each-got))
			if code != 200 {
				t.Fatalf("consume of q%d with %d jobs handed out in all: %d; want the queue's jobs", q, len(held), code)
			}
			for _, j := range jobs {
				k := fmt.Sprintf("q%d/%s", q, j.JobID)
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
	t.Logf("%d jobs handed out and held at once in %v", len(held), time.Since(began).Round(time.Millisecond))
}
