package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// TestSideServiceFailureEndsCommand: a delay service that cannot keep
// its state (a file where its directory goes, under the worker's
// --checkpoint-dir or the server's --data-dir) ends onceq worker and
// onceq serve alike: exit code 1 and an error naming the delay service,
// for the supervisor to restart the process. onceq serve used to log the
// failure and serve on, moving no delayed task or retry.
func TestSideServiceFailureEndsCommand(t *testing.T) {
	addr, _ := produceBroker(t)
	t.Run("worker", func(t *testing.T) {
		dir := unwritableDelayDir(t)
		endsOnSideFailure(t, "worker", "--brokers", addr, "--group", "sides", "--queue", "jobs", "--handler", "noop",
			"--checkpoint-dir", dir, "--metrics-addr", "")
	})
	t.Run("serve", func(t *testing.T) {
		dir := unwritableDelayDir(t)
		endsOnSideFailure(t, "serve", "--brokers", addr, "--listen", "127.0.0.1:0", "--insecure-no-auth", "--data-dir", dir)
	})
}

// unwritableDelayDir returns a state directory whose delay directory is
// a file.
func unwritableDelayDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "delay"), []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// endsOnSideFailure runs onceq with args and wants it to end with exit
// code 1 on its delay service's failure, named.
func endsOnSideFailure(t *testing.T, args ...string) {
	t.Helper()
	p := testutil.Start(t, args...)
	code, err := p.Wait(2 * time.Minute)
	if err != nil {
		t.Fatalf("onceq %s runs on without its delay service: %v\n%s", args[0], err, p.Output())
	}
	want := regexp.MustCompile(`(?m)^onceq: the delay service stopped: delay: state dir: mkdir \S+/delay: not a directory$`)
	if code != exitFailure || !want.MatchString(p.Output()) {
		t.Fatalf("exit %d; want %d and %q:\n%s", code, exitFailure, want, p.Output())
	}
}
