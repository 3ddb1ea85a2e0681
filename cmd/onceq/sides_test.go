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
	for _, tc := range []struct {
		name string
		args func(dir string) []string
	}{
		{"worker", func(dir string) []string {
			return []string{"worker", "--brokers", addr, "--group", "sides", "--queue", "jobs", "--handler", "noop",
				"--checkpoint-dir", dir, "--metrics-addr", ""}
		}},
		{"serve", func(dir string) []string {
			return []string{"serve", "--brokers", addr, "--listen", "127.0.0.1:0", "--insecure-no-auth", "--data-dir", dir}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "delay"), []byte("not a directory\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			p := testutil.Start(t, tc.args(dir)...)
			code, err := p.Wait(2 * time.Minute)
			if err != nil {
				t.Fatalf("onceq %s runs on without its delay service: %v\n%s", tc.name, err, p.Output())
			}
			want := regexp.MustCompile(`(?m)^onceq: the delay service stopped: delay: state dir: mkdir \S+/delay: not a directory$`)
			if code != exitFailure || !want.MatchString(p.Output()) {
				t.Fatalf("exit %d; want %d and %q:\n%s", code, exitFailure, want, p.Output())
			}
		})
	}
}
