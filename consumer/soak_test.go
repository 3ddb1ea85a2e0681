package consumer_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/testutil"
)

// TestSoak runs one worker process for ONCEQ_SOAK (for example 1h; make
// soak) under a steady load, sampling its metrics: its goroutines and
// resident memory must stay flat within 10% between the second quarter
// and the last, it must commit over 40,000 transactions on its one
// transactional ID, and every task must be copied exactly once.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("ONCEQ_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("set ONCEQ_SOAK=1h (make soak) to run the soak test")
	}
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "in", 8)
	testutil.CreateTopic(t, conn, "out", 8)
	p := startWorker(t, conn.Brokers[0], "soak", filepath.Join(t.TempDir(), "w"), "--log-level", "info",
		"--metrics-addr", "127.0.0.1:0", "--commit-interval", "40ms")
	url := p.WaitOutput(t, `serving metrics"? url=(\S+)`, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	sent := make(chan []string, 1)
	go func() { // 1,000 tasks a second, in 25 batches: about 25 transactions a second
		var ids []string
		cl, err := conn.NewClient()
		if err != nil {
			sent <- nil
			return
		}
		defer cl.Close()
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			<-tick.C
			for i := 0; i < 40; i++ {
				task := onceq.Task{ID: "soak-" + strconv.Itoa(len(ids)), Queue: "in", Payload: []byte("p")}
				task.Resolve(time.Now())
				cl.Produce(context.Background(), task.Record("in"), nil)
				ids = append(ids, task.ID)
			}
		}
		_ = cl.Flush(context.Background())
		sent <- ids
	}()

	type sample struct{ goroutines, rss, commits float64 }
	var samples []sample
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(d / 40):
			m, err := scrape(url)
			if err != nil {
				t.Fatalf("scraping %s: %v\n%s", url, err, tail(p.Output(), 2000))
			}
			samples = append(samples, sample{m["go_goroutines"], m["process_resident_memory_bytes"], m[`onceq_commit_duration_seconds_count{stage="kafka"}`]})
		}
	}
	all := <-sent
	waitOutputs(t, conn, "out", len(all), 2*time.Minute)
	p.Signal(syscall.SIGTERM)
	if code, err := p.Wait(time.Minute); err != nil || code != 0 {
		t.Fatalf("worker exit %d, %v", code, err)
	}
	q := len(samples) / 4
	avg := func(from, to int, f func(sample) float64) float64 {
		sum := 0.0
		for _, s := range samples[from:to] {
			sum += f(s)
		}
		return sum / float64(to-from)
	}
	for name, f := range map[string]func(sample) float64{
		"goroutines": func(s sample) float64 { return s.goroutines },
		"rss":        func(s sample) float64 { return s.rss },
	} {
		early, late := avg(q, 2*q, f), avg(len(samples)-q, len(samples), f)
		t.Logf("%s: %.0f in the second quarter, %.0f in the last", name, early, late)
		if late > early*1.1 {
			t.Errorf("%s grew by %.0f%%", name, (late/early-1)*100)
		}
	}
	commits := samples[len(samples)-1].commits
	t.Logf("%d tasks, %.0f transactions on one transactional ID", len(all), commits)
	if commits < 40_000 && d >= time.Hour {
		t.Errorf("only %.0f transactions", commits)
	}
	checkExactlyOnce(t, testutil.ReadCommitted(t, conn, 5*time.Minute, "out"), all)
}

// scrape reads the unlabelled (or fully labelled) samples of a Prometheus
// text page.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url) //nolint:gosec // a loopback URL the worker printed
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}
