package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/producer"
)

// Names of the runs in reports.
const (
	runProducer = "onceq producer"
	runRawKafka = "franz-go producer"
	runCopyLoop = "franz-go GroupTransactSession copy loop"
	runDelaySvc = "onceq delay service"
)

func workerRunName(g consumer.Guarantee) string { return "onceq worker " + string(g) }

func (e *env) newProducer() (*producer.Producer, error) {
	return producer.New(producer.Conn(e.conn), producer.Logger(e.o.Logger))
}

// runProduce submits the load with the producer's SubmitMany and, as the
// baseline, produces the same records (key, value, onceq-id and
// onceq-enqueued headers) with a raw franz-go client of the producer's
// settings, both in batches of submitBatch. The two take turns in rounds
// of a tenth of the load, so that load from elsewhere on the machine
// falls on both alike. Latency is the time from a batch's submission to
// each acknowledgment.
func runProduce(ctx context.Context, e *env, l *load) ([]RunResult, error) {
	in, raw := e.name("in"), e.name("raw")
	baseline := !e.o.NoBaselines
	if err := e.createTopics(ctx, in); err != nil {
		return nil, err
	}
	p, err := e.newProducer()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var rc *kgo.Client
	if baseline {
		if err := e.createTopics(ctx, raw); err != nil {
			return nil, err
		}
		if rc, err = e.conn.NewClient(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(producer.DefaultLinger),
			kgo.MaxBufferedRecords(producer.DefaultMaxBufferedRecords), kgo.ProducerBatchMaxBytes(onceq.DefaultMaxMessageBytes)); err != nil {
			return nil, err
		}
		defer rc.Close()
	}
	// Warm up (connections, metadata, producer IDs) with the first
	// submission, which the timing leaves out.
	first := l.order[0]
	if _, err := p.Submit(ctx, l.task(first, in, time.Now())); err != nil {
		return nil, err
	}
	if rc != nil {
		if err := rc.ProduceSync(ctx, rawRecord(l, first, raw, time.Now())).FirstErr(); err != nil {
			return nil, err
		}
	}
	rest := l.order[1:]
	ours, theirs := newRecorder(), newRecorder()
	mOurs, mTheirs := startMeter(), startMeter()
	var tookOurs, tookTheirs time.Duration
	var done atomic.Int64
	end := e.o.Progress.phase("produce", int64(len(rest)), done.Load)
	round := max(len(rest)/10, 1)
	for a := 0; a < len(rest); a += round {
		part := rest[a:min(a+round, len(rest))]
		if rc != nil {
			took, err := produceRaw(ctx, rc, l, part, raw, theirs, mTheirs)
			if err != nil {
				end()
				return nil, err
			}
			tookTheirs += took
		}
		start := time.Now()
		err := l.submitAll(ctx, p, part, in, 0, nil, func(d time.Duration) { ours.record(d); mOurs.add(1); done.Add(1) })
		if err != nil {
			end()
			return nil, err
		}
		tookOurs += time.Since(start)
	}
	end()
	runs := []RunResult{newRun(runProducer, false, len(rest), l.size, tookOurs)}
	runs[0].Latency, runs[0].Timeline = ours.summary(), mOurs.finish()
	v, err := e.verify(ctx, in, expectation{l: l})
	if err != nil {
		return nil, err
	}
	runs[0].Verification = v
	if rc != nil {
		r := newRun(runRawKafka, true, len(rest), l.size, tookTheirs)
		r.Latency, r.Timeline = theirs.summary(), mTheirs.finish()
		runs = append(runs, r)
	}
	return runs, nil
}

// rawRecord is the record the producer writes for task i, built by hand.
func rawRecord(l *load, i int32, topic string, now time.Time) *kgo.Record {
	id := l.id(i)
	hs := make([]kgo.RecordHeader, 0, 3)
	hs = append(hs, kgo.RecordHeader{Key: onceq.HeaderID, Value: []byte(id)})
	if l.want[i] == 1 {
		hs = append(hs, kgo.RecordHeader{Key: onceq.HeaderGeneratedID, Value: []byte("1")})
	}
	hs = append(hs, kgo.RecordHeader{Key: onceq.HeaderEnqueued, Value: strconv.AppendInt(nil, now.UnixMilli(), 10)})
	return &kgo.Record{Topic: topic, Key: []byte(id), Value: l.payload(now), Headers: hs}
}

// produceRaw produces the tasks of part with cl and waits for them. As
// submitAll does with the producer, it produces them in batches of
// submitBatch with one promise a batch, as a franz-go user producing in
// bulk does: the records of a batch are stamped with one time, and their
// latencies count from it.
func produceRaw(ctx context.Context, cl *kgo.Client, l *load, part []int32, topic string, lat *recorder, m *meter) (time.Duration, error) {
	var (
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for a := 0; a < len(part); a += submitBatch {
		now := time.Now()
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			lat.record(time.Since(now))
			m.add(1)
		}
		for _, i := range part[a:min(a+submitBatch, len(part))] {
			cl.Produce(ctx, rawRecord(l, i, topic, now), promise)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	return time.Since(start), firstErr
}

// runProcess pre-loads the queue and drains it with workers and with the
// baselines: franz-go's GroupTransactSession copy loop and, for an
// exactly-once run, at-least-once workers. Each drains the whole queue in
// a group of its own into an output topic of its own. The copy loop goes
// first: the first read of a queue is the slowest (the broker and the heap
// warm up), and neither worker run should pay for it alone. The queue is
// pre-loaded, so latency would measure the wait in the backlog: the
// report leaves it out.
func runProcess(ctx context.Context, e *env, l *load) ([]RunResult, error) {
	in := e.name("in")
	if err := e.createTopics(ctx, in); err != nil {
		return nil, err
	}
	p, err := e.newProducer()
	if err != nil {
		return nil, err
	}
	var n atomic.Int64
	end := e.o.Progress.phase("preload", int64(len(l.order)), n.Load)
	err = l.submitAll(ctx, p, l.order, in, 0, nil, func(time.Duration) { n.Add(1) })
	end()
	p.Close()
	if err != nil {
		return nil, err
	}
	var copied RunResult
	if !e.o.NoBaselines {
		if copied, err = e.copyRun(ctx, in, len(l.order)); err != nil {
			return nil, err
		}
	}
	run, err := e.drain(ctx, l, e.o.Guarantee, false, in, "out", nil, nil)
	if err != nil {
		return nil, err
	}
	runs := []RunResult{run}
	if e.o.NoBaselines {
		return runs, nil
	}
	runs = append(runs, copied)
	if e.o.Guarantee == consumer.ExactlyOnce {
		if run, err = e.drain(ctx, l, consumer.AtLeastOnce, true, in, "alo-out", nil, nil); err != nil {
			return nil, err
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// drain runs workers with guarantee g over in, into the topic named
// outName, until they committed everything submitted. With submit set
// (e2e) it starts submitting once the workers joined, and the run's time
// starts then; the run then also says whether the workers kept up with
// the submissions (RunResult.KeptUp). Otherwise (process) the run's time
// starts at the first handler start. lat, if not nil, records submission
// to handler start.
func (e *env) drain(ctx context.Context, l *load, g consumer.Guarantee, baseline bool, in, outName string, submit func() error, lat *recorder) (RunResult, error) {
	out, group := e.name(outName), e.name(outName+"-group")
	if err := e.createTopics(ctx, out); err != nil {
		return RunResult{}, err
	}
	w, err := e.startWorkers(ctx, l, group, in, out, g, lat)
	if err != nil {
		return RunResult{}, err
	}
	name := workerRunName(g)
	submitted := make(chan struct{})
	var start time.Time
	var submitEnd atomic.Int64 // unix nanoseconds of the last acknowledgment
	var submitErr atomic.Pointer[error]
	failed := func() error {
		if p := submitErr.Load(); p != nil {
			return *p
		}
		return w.failed()
	}
	if submit == nil {
		close(submitted)
	} else {
		if err := e.waitJoined(ctx, group, e.o.Workers, w.failed); err != nil {
			_ = w.stop()
			return RunResult{}, err
		}
		start = time.Now()
		go func() {
			if err := submit(); err != nil {
				submitErr.Store(&err)
				return
			}
			submitEnd.Store(time.Now().UnixNano())
			close(submitted)
		}()
	}
	total := int64(len(l.order))
	if g == consumer.ExactlyOnce {
		total = int64(len(l.want)) // duplicates are skipped before the handler
	}
	end := e.o.Progress.phase(name, total, w.m.n.Load)
	doneAt, err := e.waitConsumed(ctx, group, in, submitted, failed)
	end()
	timeline := w.m.finish()
	if serr := w.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return RunResult{}, err
	}
	if start.IsZero() {
		start = w.started()
	}
	run := newRun(name, baseline, len(l.order), l.size, doneAt.Sub(start))
	run.Timeline, run.Latency = timeline, lat.summary()
	if submit != nil {
		run.setPace(start, time.Unix(0, submitEnd.Load()), w.lastFinish(), l.longestWork())
	}
	run.Verification, err = e.verify(ctx, out, expectation{l: l, once: true, runs: g == consumer.ExactlyOnce, allowDups: g == consumer.AtLeastOnce})
	return run, err
}

// copyRun drains in with CopyLoop.
func (e *env) copyRun(ctx context.Context, in string, total int) (RunResult, error) {
	out := e.name("copy-out")
	if err := e.createTopics(ctx, out); err != nil {
		return RunResult{}, err
	}
	m := startMeter()
	var copied atomic.Int64
	end := e.o.Progress.phase(runCopyLoop, int64(total), copied.Load)
	took, err := CopyLoop(ctx, e.conn, in, out, e.name("copy-group"), total, func(n int) {
		m.add(int64(n) - copied.Swap(int64(n)))
	})
	end()
	timeline := m.finish()
	if err != nil {
		return RunResult{}, err
	}
	run := newRun(runCopyLoop, true, total, e.o.Size, took)
	run.Timeline = timeline
	return run, nil
}

// runE2E submits at the offered rate while workers run the tasks, then
// the same with at-least-once workers as the baseline of an exactly-once
// run; both run the same tasks with the same handler-time profile (the
// same slow tasks). Latency is submission to handler start; the run's time
// is from the first submission to the commit of the last task, and each
// run says whether its workers kept up with the offered rate.
func runE2E(ctx context.Context, e *env, l *load) ([]RunResult, error) {
	one := func(g consumer.Guarantee, baseline bool, prefix string) (RunResult, error) {
		in := e.name(prefix + "in")
		if err := e.createTopics(ctx, in); err != nil {
			return RunResult{}, err
		}
		p, err := e.newProducer()
		if err != nil {
			return RunResult{}, err
		}
		defer p.Close()
		submit := func() error { return l.submitAll(ctx, p, l.order, in, e.o.Rate, nil, nil) }
		return e.drain(ctx, l, g, baseline, in, prefix+"out", submit, newRecorder())
	}
	run, err := one(e.o.Guarantee, false, "")
	if err != nil || e.o.NoBaselines || e.o.Guarantee != consumer.ExactlyOnce {
		return []RunResult{run}, err
	}
	alo, err := one(consumer.AtLeastOnce, true, "alo-")
	return []RunResult{run, alo}, err
}
