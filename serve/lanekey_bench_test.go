package serve_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/producer"
	"github.com/onceq/onceq/serve"
)

// BenchmarkLaneSameID: N lane queues (ONCEQ_BENCH_QUEUES, default 10,000)
// of one lane of 4 partitions, lmstfy/bench.q-00000 and on, each holding
// one job of the same ID, j1, published with its pending record as a
// publish with an ID is; no consumer until all are written. Then 8 HTTP
// clients consume each queue's job, one request a queue (count=1), the
// queues in a shuffled order (seeded), not the order of their jobs in the
// lane, and acknowledge it: the consume's time, p50, p99 and max in ms,
// and the max of those after the first wave of 8, which wakes the lane (a
// round takes new queues). A queue's job waits behind no other queue's.
// Run:
//
//	go test ./serve -run '^$' -bench LaneSameID -benchtime 1x -timeout 20m
func BenchmarkLaneSameID(b *testing.B) {
	n := benchQueues(b)
	a := start(b, serve.Lane("lmstfy"), serve.CreateQueues(4))
	tok := a.token("bench", false)
	ctx := context.Background()
	p, err := producer.New(producer.Conn(a.conn), producer.CreateQueues(4))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	cl := keepAlive()
	const clients = 8
	for round := 0; b.Loop(); round++ {
		queue := func(i int) string { return fmt.Sprintf("r%d-q-%05d", round, i) }
		setup := time.Now()
		for from := 0; from < n; from += 1000 {
			err := p.Tx(ctx, func(tx *producer.Tx) error {
				for i := from; i < min(from+1000, n); i++ {
					if err := tx.SubmitPending(onceq.Task{Queue: "lmstfy/bench." + queue(i), ID: "j1", Payload: []byte("x")}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("%d lane queues holding j1 set up in %v", n, time.Since(setup).Round(time.Millisecond))
		var (
			mu          sync.Mutex
			took, later []time.Duration // every consume's; those after the first wave's
			started     atomic.Int64
		)
		next := make(chan int, n)
		for _, i := range rand.New(rand.NewPCG(1, uint64(round))).Perm(n) {
			next <- i
		}
		close(next)
		all, _ := hammer(clients, n, func() error {
			q := queue(<-next)
			first := started.Add(1) <= clients
			t0 := time.Now()
			code, jobs := consumeB(cl, a.url+"/api/bench/"+q+"?ttr=60&timeout=5&count=1", tok)
			d := time.Since(t0)
			if code != 200 || len(jobs) != 1 || jobs[0] != "j1" {
				return fmt.Errorf("consume of %s after %v: %d %v, want its j1", q, d, code, jobs)
			}
			mu.Lock()
			took = append(took, d)
			if !first {
				later = append(later, d)
			}
			mu.Unlock()
			return expect(request(cl, "DELETE", a.url+"/api/bench/"+q+"/job/j1", tok, ""))(204)
		})
		if all.err != nil {
			b.Fatal(all.err)
		}
		slices.Sort(took)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(took[len(took)/2]), "consume-p50-ms")
		b.ReportMetric(ms(took[len(took)*99/100]), "consume-p99-ms")
		b.ReportMetric(ms(took[len(took)-1]), "consume-max-ms")
		if len(later) > 0 {
			b.ReportMetric(ms(slices.Max(later)), "later-consume-max-ms")
		}
	}
}
