package serve_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
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
		if code, body := a.do("GET", "/api/shop/big0/task/too-big", tok, ""); code != http.StatusNotFound {
			t.Fatalf("the refused job: %d %v; want 404 (nothing written)", code, body)
		}
		code, body := a.do("GET", "/api/shop/big1/task/big-1", tok, "")
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

// TestJobAttributesCountTowardPayload: a job's Job-Attr-* headers count,
// as sent, with its payload toward MaxPayloadBytes: an attribute of 900
// KB (cut to 128 bytes when kept, but read whole) is refused with 413
// naming the headers, in a publish, an lmstfy bulk publish and a
// republish, and so is a payload that fits alone but not with its
// attributes; the largest payload that fits with them is taken. A bulk
// task's headers count with its payload too. Nothing refused is written.
func TestJobAttributesCountTowardPayload(t *testing.T) {
	const limit = 64 << 10
	a := start(t, serve.MaxPayloadBytes(limit), serve.CreateQueues(1))
	tok := a.token("shop", false)
	huge := http.Header{"Enable-Job-Version": {"YES"}, "Job-Attr-Note": {strings.Repeat("n", 900_000)}}
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/api/shop/attrs?id=huge-1", "x"},
		{"PUT", "/api/shop/attrs/bulk", `["x"]`},
		{"PUT", "/api/shop/attrs/job/old-1", "x"},
	} {
		code, body := a.doWith(tc.method, tc.path, tok, tc.body, huge)
		if msg := fmt.Sprint(body["error"]); code != http.StatusRequestEntityTooLarge || body["field"] != "Job-Attr" ||
			!strings.Contains(msg, "Job-Attr-* headers take 900013 bytes") || !strings.Contains(msg, "--max-payload-bytes") {
			t.Errorf("%s %s with a 900 KB attribute: %d %v; want 413 naming the Job-Attr-* headers and --max-payload-bytes", tc.method, tc.path, code, body)
		}
	}
	// 10 + 990 bytes of attributes: the payload has limit-1000 bytes.
	attrs := http.Header{"Enable-Job-Version": {"YES"}, "Job-Attr-K": {strings.Repeat("v", 990)}}
	code, body := a.doWith("PUT", "/api/shop/attrs?id=over-1", tok, strings.Repeat("p", limit-999), attrs)
	if msg := fmt.Sprint(body["error"]); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "less the 1000 bytes of the Job-Attr-* headers") {
		t.Errorf("a payload that fits alone, not with its attributes: %d %v; want 413", code, body)
	}
	if code, body := a.doWith("PUT", "/api/shop/attrs/bulk", tok, `["`+strings.Repeat("p", limit-1000)+`"]`, attrs); code != http.StatusRequestEntityTooLarge {
		t.Errorf("an lmstfy bulk job that fits alone, not with its attributes: %d %v; want 413", code, body)
	}
	if code, body := a.doWith("PUT", "/api/shop/attrs?id=fits-1", tok, strings.Repeat("p", limit-1000), attrs); code != http.StatusCreated {
		t.Fatalf("a payload that fits with its attributes: %d %v; want 201", code, body)
	}
	bulk := fmt.Sprintf(`[{"id":"hdr-1","payload":%q,"headers":{"h":%q}}]`, strings.Repeat("p", limit/2), strings.Repeat("h", limit/2))
	if code, body := a.do("POST", "/api/shop/attrs/bulk", tok, bulk); code != http.StatusRequestEntityTooLarge || !strings.Contains(fmt.Sprint(body["error"]), "headers") {
		t.Errorf("a bulk task whose payload and headers are past the limit: %d %v; want 413", code, body)
	}
	for _, id := range []string{"huge-1", "over-1", "hdr-1"} {
		if code, _ := a.do("GET", "/api/shop/attrs/task/"+id, tok, ""); code != http.StatusNotFound {
			t.Errorf("refused job %s: %d; want 404 (nothing written)", id, code)
		}
	}
}
