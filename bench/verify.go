package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/handlers"
)

// RunsHeader is the header in which a counting handler carries its per-ID
// run counter (the state counter runs/<id>, incremented in the same
// transaction as the output): the count:QUEUE handler's. Every value must
// be 1.
const RunsHeader = handlers.RunsHeader

// Verification is what an independent reader found in a run's output: a
// fresh read_committed consumer of the topic, which sees only committed
// records, checked against what was submitted.
type Verification struct {
	// Topic is the topic read.
	Topic string `json:"topic"`
	// Expected is the number of records that must be there: one per task
	// ID (for the produce scenario, one per submission).
	Expected int `json:"expected"`
	// Records is what the reader read.
	Records int `json:"records"`
	// Unique is the number of expected IDs seen at least once.
	Unique int `json:"unique"`
	// Duplicates counts records beyond the expected number of their ID.
	Duplicates int `json:"duplicates"`
	// Missing counts expected records not seen.
	Missing int `json:"missing"`
	// Unexpected counts records whose ID the run never submitted.
	Unexpected int `json:"unexpected"`
	// RunCounters is true when per-ID run counters were checked;
	// Reruns counts IDs whose counter is above 1 or unreadable.
	RunCounters bool `json:"run_counters"`
	Reruns      int  `json:"reruns"`
	// Early counts tasks published before their due time (delay).
	Early int `json:"early"`
	// DuplicatesAllowed is true for at-least-once runs: duplicates are
	// reported, not failed.
	DuplicatesAllowed bool `json:"duplicates_allowed"`
	OK                bool `json:"ok"`
	// Problems says what failed, in words.
	Problems []string `json:"problems,omitempty"`
}

// expectation is what a run's output must hold.
type expectation struct {
	l         *load
	once      bool // one record per ID, however often it was submitted
	runs      bool // check RunsHeader
	allowDups bool
	due       bool // check publish time against onceq-due
	// visibleEarly counts tasks a live reader saw before their due time.
	visibleEarly int
}

// checker verifies records one at a time, keeping a count per task.
type checker struct {
	x    expectation
	got  []uint8 // saturating
	runs []bool  // an unreadable or above-1 run counter was seen
	v    Verification
}

func newChecker(x expectation, topic string) *checker {
	c := &checker{x: x, got: make([]uint8, len(x.l.want)), v: Verification{Topic: topic, RunCounters: x.runs, DuplicatesAllowed: x.allowDups}}
	if x.runs {
		c.runs = make([]bool, len(x.l.want))
	}
	return c
}

// want is the number of records index i must have.
func (c *checker) want(i int) int {
	if c.x.once {
		return 1
	}
	return int(c.x.l.want[i])
}

func (c *checker) add(r *kgo.Record) {
	c.v.Records++
	var id, runs, due string
	for _, h := range r.Headers {
		switch h.Key {
		case onceq.HeaderID:
			id = string(h.Value)
		case RunsHeader:
			runs = string(h.Value)
		case onceq.HeaderDue:
			due = string(h.Value)
		}
	}
	i, ok := c.x.l.index(id)
	if !ok {
		c.v.Unexpected++
		return
	}
	if c.got[i] < 255 {
		c.got[i]++
	}
	if c.x.runs && runs != "1" {
		c.runs[i] = true
	}
	if c.x.due {
		ms, err := strconv.ParseInt(due, 10, 64)
		if err != nil || r.Timestamp.UnixMilli() < ms {
			c.v.Early++
		}
	}
}

// result finishes the verification.
func (c *checker) result() *Verification {
	v := c.v
	for i := range c.got {
		w, g := c.want(i), int(c.got[i])
		v.Expected += w
		if g > 0 {
			v.Unique++
		}
		if g > w {
			v.Duplicates += g - w
		} else {
			v.Missing += w - g
		}
		if c.runs != nil && c.runs[i] {
			v.Reruns++
		}
	}
	v.Early += c.x.visibleEarly
	problem := func(n int, what string) {
		if n > 0 {
			v.Problems = append(v.Problems, fmt.Sprintf("%d %s", n, what))
		}
	}
	problem(v.Missing, "missing: submitted and never seen in the output")
	if !v.DuplicatesAllowed {
		problem(v.Duplicates, "duplicates: seen more often than submitted (or more than once)")
		problem(v.Reruns, "reruns: run counter above 1")
	}
	problem(v.Unexpected, "unexpected: IDs never submitted")
	problem(v.Early, "early: published before their due time")
	v.OK = len(v.Problems) == 0
	return &v
}

// verify reads topic with a fresh read_committed consumer and checks it.
func (e *env) verify(ctx context.Context, topic string, x expectation) (*Verification, error) {
	c := newChecker(x, topic)
	err := readCommitted(ctx, e.conn, topic, func(r *kgo.Record) {
		recs := []*kgo.Record{r}
		if e.o.Tamper != nil {
			recs = e.o.Tamper(recs)
		}
		for _, r := range recs {
			c.add(r)
		}
	})
	if err != nil {
		return nil, err
	}
	return c.result(), nil
}

// fenceHeader marks the fences readCommitted writes to find the end of
// each partition.
const fenceHeader = "bench-fence"

// readCommitted reads every committed record of topic with a fresh
// read_committed consumer, passing them to each one by one, up to a
// fence it writes to the end of every partition first (broker.ReadFenced;
// broker.ReadPartitions says why not the last stable offset). The fences
// of earlier reads are skipped.
func readCommitted(ctx context.Context, conn broker.Conn, topic string, each func(*kgo.Record)) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	nonce := []byte(strconv.FormatInt(time.Now().UnixNano(), 36))
	err := broker.ReadFenced(ctx, conn, topic, func(int32) *kgo.Record {
		return &kgo.Record{Headers: []kgo.RecordHeader{{Key: fenceHeader, Value: nonce}}}
	}, func(r *kgo.Record) error {
		if !isFence(r) {
			each(r)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// isFence reports whether r is a fence that readCommitted wrote.
func isFence(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == fenceHeader {
			return true
		}
	}
	return false
}

// tailer reads a topic as a read_committed consumer while a run goes on,
// and calls seen for each record when it becomes visible.
type tailer struct {
	cl   *kgo.Client
	done chan struct{}
}

func startTailer(conn broker.Conn, topic string, seen func(r *kgo.Record, at time.Time)) (*tailer, error) {
	cl, err := conn.NewClient(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	t := &tailer{cl: cl, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { seen(r, now) })
		}
	}()
	return t, nil
}

func (t *tailer) stop() {
	t.cl.Close()
	<-t.done
}
