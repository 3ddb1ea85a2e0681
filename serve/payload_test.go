package serve_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"

	"github.com/onceq/onceq/serve"
)

// TestLargePayloads: jobs of the largest payload a server takes
// (DefaultMaxPayloadBytes, 256 KiB of random bytes), spread over three
// queues, are peeked and consumed four to a request with every byte
// intact, and acknowledged once each; one byte more is refused with 413
// and writes nothing. On both layouts: on a lane, the three queues'
// records share one topic and wait in the server's lines.
func TestLargePayloads(t *testing.T) {
	eachLayout(t, func(t *testing.T, layout serve.Opt) {
		a := start(t, layout, serve.CreateQueues(2))
		tok := a.token("shop", false)
		queues := []string{"big0", "big1", "big2"}
		payloads := map[string][]byte{}
		for i := range 12 {
			p := make([]byte, serve.DefaultMaxPayloadBytes)
			if _, err := rand.Read(p); err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("big-%d", i)
			payloads[id] = p
			if code, body := a.do("PUT", "/api/shop/"+queues[i%3]+"?id="+id+"&tries=2", tok, string(p)); code != 201 {
				t.Fatalf("publish %s: %d %v", id, code, body)
			}
		}
		tooBig := string(make([]byte, serve.DefaultMaxPayloadBytes+1))
		if code, body := a.do("PUT", "/api/shop/big0?id=too-big", tok, tooBig); code != http.StatusRequestEntityTooLarge {
			t.Fatalf("publish of %d bytes: %d %v; want 413", len(tooBig), code, body)
		}
		if code, body := a.do("GET", "/api/shop/big0/job/too-big", tok, ""); code != http.StatusNotFound {
			t.Fatalf("the refused job: %d %v; want 404 (nothing written)", code, body)
		}
		code, body := a.do("GET", "/api/shop/big1/job/big-1", tok, "")
		if data, _ := body["data"].(string); code != 200 || data != base64.StdEncoding.EncodeToString(payloads["big-1"]) {
			t.Fatalf("peek of big-1: %d, %d bytes of data; want 200 and its payload", code, len(data))
		}
		acked := map[string]bool{}
		for len(acked) < len(payloads) {
			code, jobs := consume(t, a, tok, "/api/shop/big0,big1,big2?count=4&ttr=60&timeout=30")
			if code != 200 || len(jobs) == 0 {
				t.Fatalf("consume with %d of %d acknowledged: %d %+v", len(acked), len(payloads), code, len(jobs))
			}
			for _, j := range jobs {
				got, err := base64.StdEncoding.DecodeString(j.Data)
				if err != nil || !bytes.Equal(got, payloads[j.JobID]) {
					t.Fatalf("%s: %d bytes, not the %d published (%v)", j.JobID, len(got), len(payloads[j.JobID]), err)
				}
				if acked[j.JobID] {
					t.Fatalf("%s handed out again after its ACK", j.JobID)
				}
				if code, body := a.do("DELETE", "/api/shop/"+j.Queue+"/job/"+j.JobID, tok, ""); code != 204 {
					t.Fatalf("ACK of %s: %d %v", j.JobID, code, body)
				}
				acked[j.JobID] = true
			}
		}
		for _, q := range queues {
			if code, body := a.do("GET", "/api/shop/"+q+"/size", tok, ""); code != 200 || body["size"] != float64(0) {
				t.Fatalf("size of %s after every job was acknowledged: %d %v; want 0", q, code, body)
			}
		}
	})
}
