package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// demoWorker is an "onceq worker" process of the demo.
type demoWorker struct {
	n       int
	proc    *os.Process
	done    chan error
	logPath string
}

func (d *demoRun) startWorker(n int) (*demoWorker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	w := &demoWorker{n: n, done: make(chan error, 1), logPath: filepath.Join(d.dir, fmt.Sprintf("worker-%d.log", n))}
	logf, err := os.OpenFile(w.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{self, "worker", "--brokers", strings.Join(d.conn.Brokers, ","), "--queue", d.names.Queue, "--handler", "flaky:" + d.names.Out,
		"--group", d.names.Group, "--checkpoint-dir", filepath.Join(d.dir, fmt.Sprintf("worker-%d", n)),
		"--max-attempts", "3", "--backoff-base", "500ms", "--backoff-factor", "2", "--session-timeout", "6s",
		"--transaction-timeout", "5s", "--metrics-addr", "127.0.0.1:0"}
	w.proc, err = os.StartProcess(self, args, &os.ProcAttr{Env: d.env, Files: []*os.File{nil, logf, logf}})
	if err != nil {
		return nil, fmt.Errorf("demo: starting worker %d: %w", n, err)
	}
	go func() {
		_, err := w.proc.Wait()
		w.done <- err
	}()
	return w, nil
}

func (d *demoRun) stopWorkers() {
	for _, w := range d.workers {
		_ = w.proc.Signal(syscall.SIGTERM)
	}
	for _, w := range d.workers {
		select {
		case <-w.done:
		case <-time.After(20 * time.Second):
			_ = w.proc.Kill()
		}
	}
}

// explore keeps everything running until ctx is done.
func (d *demoRun) explore(ctx context.Context) {
	out := d.g.stdout
	fmt.Fprintf(out, "\nkept running (Ctrl-C to stop): --brokers %s\n", strings.Join(d.conn.Brokers, ","))
	for _, w := range d.workers {
		if url := metricsURL(w.logPath); url != "" {
			fmt.Fprintf(out, "  worker %d metrics: %s\n", w.n, url)
		}
	}
	<-ctx.Done()
}

// metricsURL finds the metrics URL a worker logged.
func metricsURL(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	var url string
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, "url=http://"); i >= 0 {
			url = strings.Fields(line[i+4:])[0]
		}
	}
	return url
}
