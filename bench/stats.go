package bench

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// recorder collects durations in an HDR histogram of microseconds, from 1µs
// to an hour with three significant digits. It is safe for concurrent use.
type recorder struct {
	mu    sync.Mutex
	h     *hdrhistogram.Histogram
	early int64 // negative values: counted, recorded as 0
}

func newRecorder() *recorder {
	return &recorder{h: hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)}
}

// record adds d. A negative d counts as early and is recorded as zero; a d
// above an hour is recorded as an hour.
func (r *recorder) record(d time.Duration) {
	us := d.Microseconds()
	r.mu.Lock()
	if d < 0 {
		r.early++
		us = 0
	}
	_ = r.h.RecordValue(min(us, r.h.HighestTrackableValue()))
	r.mu.Unlock()
}

// summary returns the distribution, or nil when nothing was recorded or
// r is nil.
func (r *recorder) summary() *Distribution {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.h.TotalCount()
	if n == 0 {
		return nil
	}
	ms := func(us int64) float64 { return math.Round(float64(us)) / 1000 }
	d := &Distribution{
		Count: n,
		Mean:  math.Round(r.h.Mean()) / 1000,
		P50:   ms(r.h.ValueAtQuantile(50)),
		P95:   ms(r.h.ValueAtQuantile(95)),
		P99:   ms(r.h.ValueAtQuantile(99)),
		Max:   ms(r.h.Max()),
		Early: r.early,
	}
	d.Histogram = logBuckets(r.h.Distribution())
	return d
}

// logBuckets folds the histogram's bars into buckets whose upper bounds
// double from 0.125 ms: few enough to chart, fine enough to read.
func logBuckets(bars []hdrhistogram.Bar) []Bucket {
	var out []Bucket
	le := 125.0 // µs
	for _, b := range bars {
		if b.Count == 0 {
			continue
		}
		for float64(b.From) >= le {
			le *= 2
		}
		if len(out) == 0 || out[len(out)-1].LE != le/1000 {
			out = append(out, Bucket{LE: le / 1000})
		}
		out[len(out)-1].Count += b.Count
	}
	return out
}

// meter counts completed tasks and samples the count into a timeline.
type meter struct {
	n       atomic.Int64
	mu      sync.Mutex
	start   time.Time
	last    int64
	lastAt  time.Time
	samples []Point
	stop    chan struct{}
	done    chan struct{}
}

// timelineStep is how often a meter samples its count.
const timelineStep = 500 * time.Millisecond

// startMeter starts sampling; the timeline's time 0 is now.
func startMeter() *meter {
	m := &meter{start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	m.lastAt = m.start
	go func() {
		defer close(m.done)
		t := time.NewTicker(timelineStep)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				m.sample(time.Now())
				return
			case now := <-t.C:
				m.sample(now)
			}
		}
	}()
	return m
}

func (m *meter) add(n int64) { m.n.Add(n) }

func (m *meter) sample(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.n.Load()
	dt := now.Sub(m.lastAt).Seconds()
	if dt <= 0 {
		return
	}
	m.samples = append(m.samples, Point{T: round3(now.Sub(m.start).Seconds()), PerSec: math.Round(float64(n-m.last) / dt)})
	m.last, m.lastAt = n, now
}

// finish stops sampling and returns the timeline.
func (m *meter) finish() []Point {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.samples
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
