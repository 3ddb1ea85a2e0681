package serve_test

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// latencies collects request times from several goroutines, and the
// first failed call's error.
type latencies struct {
	testutil.Latencies
	mu  sync.Mutex // guards err
	err error
}

// request sends one request with keep-alive and drains its answer.
func request(cl *http.Client, method, url, tok, body string) (int, error) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("X-Token", tok)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func keepAlive() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

// BenchmarkPublish: 16 HTTP clients with keep-alive publish one task a
// request (no ID: the fast path), then bulk requests of 1,000 tasks, on
// the same two cores as the server and the broker. Run:
//
//	go test ./serve -run '^$' -bench Publish -benchtime 1x
func BenchmarkPublish(b *testing.B) {
	a := start(b, serve.CreateQueues(8), serve.DelayService(false))
	tok := a.token("bench", false)
	cl := keepAlive()
	const clients, single, bulkTasks, bulkSize = 16, 20_000, 200_000, 1_000
	for b.Loop() {
		lat, took := hammer(clients, single, func() error {
			return expect(request(cl, "PUT", a.url+"/api/bench/one", tok, "0123456789"))(201)
		})
		b.ReportMetric(single/took.Seconds(), "publish-tasks/s")
		lat.Report(b, "publish")

		var body strings.Builder
		body.WriteByte('[')
		for i := range bulkSize {
			if i > 0 {
				body.WriteByte(',')
			}
			body.WriteString(`{"payload":"0123456789"}`)
		}
		body.WriteByte(']')
		blat, took := hammer(4, bulkTasks/bulkSize, func() error {
			return expect(request(cl, "POST", a.url+"/api/bench/many/bulk", tok, body.String()))(201)
		})
		b.ReportMetric(bulkTasks/took.Seconds(), "bulk-tasks/s")
		blat.Report(b, "bulk")
		for _, err := range []error{lat.err, blat.err} {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// hammer runs fn n times from clients goroutines and returns the time of
// each call, the first error, and the time it all took.
func hammer(clients, n int, fn func() error) (*latencies, time.Duration) {
	lat := &latencies{}
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				if err := fn(); err != nil {
					lat.mu.Lock()
					lat.err = cmp.Or(lat.err, err)
					lat.mu.Unlock()
					return
				}
				lat.Add(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	return lat, time.Since(start)
}

// expect turns a request's status and error into an error unless the
// status is want.
func expect(code int, err error) func(want int) error {
	return func(want int) error {
		if err == nil && code != want {
			err = fmt.Errorf("status %d, want %d", code, want)
		}
		return err
	}
}

// BenchmarkConsumeAck: 16, then 32 HTTP clients with keep-alive consume
// one task a request (count=1) and acknowledge it; an acknowledgment
// answers once its commit is visible. Run:
//
//	go test ./serve -run '^$' -bench ConsumeAck -benchtime 1x
func BenchmarkConsumeAck(b *testing.B) {
	a := start(b, serve.CreateQueues(8), serve.DataDir(b.TempDir()))
	tok := a.token("bench", false)
	cl := keepAlive()
	const tasks = 10_000
	for i := 0; b.Loop(); i++ {
		for _, clients := range []int{16, 32} {
			queue := fmt.Sprintf("q%d-%d", i, clients)
			var body strings.Builder
			for j := range tasks {
				if j%1000 == 0 {
					body.Reset()
					body.WriteByte('[')
				} else {
					body.WriteByte(',')
				}
				body.WriteString(`{"payload":"0123456789"}`)
				if j%1000 == 999 {
					body.WriteByte(']')
					if err := expect(request(cl, "POST", a.url+"/api/bench/"+queue+"/bulk", tok, body.String()))(201); err != nil {
						b.Fatalf("bulk: %v", err)
					}
				}
			}
			var clat latencies
			alat, took := hammer(clients, tasks, func() error {
				for {
					t0 := time.Now()
					code, jobs := consumeB(cl, a.url+"/api/bench/"+queue+"?ttr=30&timeout=1&count=1", tok)
					if code == 404 {
						continue
					}
					if code != 200 || len(jobs) != 1 {
						return fmt.Errorf("consume: %d", code)
					}
					clat.Add(time.Since(t0))
					return expect(request(cl, "DELETE", a.url+"/api/bench/"+queue+"/job/"+jobs[0], tok, ""))(204)
				}
			})
			if alat.err != nil {
				b.Fatal(alat.err)
			}
			name := fmt.Sprintf("%d-clients-", clients)
			b.ReportMetric(tasks/took.Seconds(), name+"tasks/s")
			clat.Report(b, name+"consume")
			alat.Report(b, name+"consume+ack")
		}
	}
}

// consumeB long-polls for one task and returns its ID.
func consumeB(cl *http.Client, url, tok string) (int, []string) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Token", tok)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil
	}
	_, rest, _ := strings.Cut(string(b), `"job_id":"`)
	id, _, _ := strings.Cut(rest, `"`)
	return 200, []string{id}
}
