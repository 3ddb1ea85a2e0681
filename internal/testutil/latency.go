package testutil

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Latencies collects durations from several goroutines, for a benchmark
// to report their percentiles.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// Reset forgets what was recorded.
func (l *Latencies) Reset() {
	l.mu.Lock()
	l.d = nil
	l.mu.Unlock()
}

// Report reports the median and the 99th percentile, in ms, as
// name-p50-ms and name-p99-ms; nothing if none was recorded.
func (l *Latencies) Report(b *testing.B, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	b.ReportMetric(float64(l.d[len(l.d)/2].Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(l.d[len(l.d)*99/100].Microseconds())/1000, name+"-p99-ms")
}
