package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress shows how a bench run goes: on a terminal a bar that redraws
// itself, elsewhere a plain line every few seconds. A nil *Progress shows
// nothing.
type Progress struct {
	w      io.Writer
	redraw bool
	mu     sync.Mutex
	every  time.Duration
}

// NewProgress writes progress to w, redrawing one line when redraw is true
// (w is a terminal).
func NewProgress(w io.Writer, redraw bool) *Progress {
	every := 5 * time.Second
	if redraw {
		every = 200 * time.Millisecond
	}
	return &Progress{w: w, redraw: redraw, every: every}
}

// logf prints a line.
func (p *Progress) logf(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.redraw {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// phase shows the progress of a named step, count() of total, until the
// returned function is called.
func (p *Progress) phase(name string, total int64, count func() int64) (end func()) {
	if p == nil {
		return func() {}
	}
	start := time.Now()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				n := count()
				took := time.Since(start)
				p.logf("%s: %d/%d in %v (%.0f/s)", name, n, total, took.Round(time.Millisecond), float64(n)/max(took.Seconds(), 1e-9))
				return
			case <-t.C:
				p.line(name, count(), total, time.Since(start))
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); <-done }) }
}

// line prints one progress update.
func (p *Progress) line(name string, n, total int64, took time.Duration) {
	rate := float64(n) / max(took.Seconds(), 1e-9)
	frac := 0.0
	if total > 0 {
		frac = min(float64(n)/float64(total), 1)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.redraw {
		fmt.Fprintf(p.w, "%s: %d/%d (%.0f%%), %.0f/s\n", name, n, total, frac*100, rate)
		return
	}
	const width = 30
	filled := int(frac * width)
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	if filled < width {
		bar = bar[:filled] + ">" + bar[filled+1:]
	}
	fmt.Fprintf(p.w, "\r\033[K%s [%s] %3.0f%% %d/%d %.0f/s", name, bar, frac*100, n, total, rate)
}
