package delay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
	"github.com/onceq/onceq/producer"
)

// runService runs a delay service until the test ends (or stop is
// called) and fails the test if Run fails.
func runService(t testing.TB, opts ...delay.ServiceOpt) (stop func()) {
	t.Helper()
	svc, err := delay.NewService(opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("delay service: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// testLogger logs warnings and errors to stderr when -v is given.
func testLogger() *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// createQueue creates a queue whose records carry the broker's append
// time, so that a record's timestamp is when it was published.
func createQueue(t testing.TB, conn broker.Conn, name string, partitions int32) {
	t.Helper()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, name, partitions, delay.BucketTopicConfigs()); err != nil {
		t.Fatal(err)
	}
}

// submitSpread submits n tasks to queue with delays uniform over [0, spread)
// and returns their due times by ID. A task due by the time it is
// submitted goes straight to the queue.
func submitSpread(t testing.TB, conn broker.Conn, p *delay.Planner, queue string, n int, spread time.Duration, rng *rand.Rand) map[string]time.Time {
	t.Helper()
	prod, err := producer.New(producer.Conn(conn), producer.Planner(p), producer.Linger(2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var (
		mu   sync.Mutex
		dues = make(map[string]time.Time, n)
		fail error
	)
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("t-%07d", i)
		due := time.Now().Add(time.Duration(rng.Int64N(int64(spread)))).Truncate(time.Millisecond)
		dues[id] = due
		task := onceq.Task{ID: id, Queue: queue, Payload: []byte("x"), Due: due}
		prod.SubmitAsync(ctx, task, func(_ producer.Receipt, err error) {
			if err != nil {
				mu.Lock()
				fail = err
				mu.Unlock()
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fail != nil {
		t.Fatal(fail)
	}
	return dues
}

// published collects the tasks published to a queue, as a read_committed
// consumer sees them.
type published struct {
	mu    sync.Mutex
	recs  map[string][]*kgo.Record
	count int
	cl    *kgo.Client
	done  chan struct{}
}

func watchQueue(t testing.TB, conn broker.Conn, queue string) *published {
	t.Helper()
	cl, err := conn.NewClient(kgo.ConsumeTopics(queue), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	p := &published{recs: map[string][]*kgo.Record{}, cl: cl, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			p.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				task, err := onceq.FromRecord(r)
				if err != nil {
					t.Errorf("published record %s/%d/%d: %v", r.Topic, r.Partition, r.Offset, err)
					return
				}
				p.recs[task.ID] = append(p.recs[task.ID], r)
				p.count++
			})
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *published) close() {
	p.cl.Close()
	<-p.done
}

// wait waits until n records were published, or fails after timeout.
func (p *published) wait(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		c := p.count
		p.mu.Unlock()
		if c >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks published after %v", c, n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// verify checks that every task was published exactly once and none
// before its due time (the queue's append time against onceq-due), and
// returns the lateness of each.
func (p *published) verify(t testing.TB, dues map[string]time.Time) []time.Duration {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var late []time.Duration
	early, missing, dups := 0, 0, 0
	for id, due := range dues {
		rs := p.recs[id]
		switch {
		case len(rs) == 0:
			missing++
			continue
		case len(rs) > 1:
			dups++
			if dups <= 5 {
				var where []string
				for _, r := range rs {
					where = append(where, fmt.Sprintf("%s/%d/%d at due%+v by producer %d/%d", r.Topic, r.Partition, r.Offset, r.Timestamp.Sub(due), r.ProducerID, r.ProducerEpoch))
				}
				t.Errorf("task %s due %v published %d times: %v", id, due.Format("15:04:05.000"), len(rs), where)
			}
		}
		l := rs[0].Timestamp.Sub(due)
		if l < 0 {
			early++
			if early <= 5 {
				t.Errorf("task %s published at %v, %v before its due time %v", id, rs[0].Timestamp, -l, due)
			}
		}
		late = append(late, l)
	}
	if extra := len(p.recs) - (len(dues) - missing); extra > 0 {
		t.Errorf("%d unknown tasks published", extra)
	}
	if missing+dups+early > 0 {
		t.Errorf("%d tasks: %d missing, %d duplicated, %d early", len(dues), missing, dups, early)
	}
	slices.Sort(late)
	return late
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// published returns how many records were published so far.
func (p *published) published() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}
