package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds the onceq command once per test binary and returns its
// path, for tests that run and kill real processes. It is built without
// the race detector, even under -race: the in-process tests cover races,
// and race-instrumented subprocesses are too slow for the crash tests on a
// small machine. ONCEQ_RACE_BINARY=1 builds it with -race.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "onceq-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "onceq")
		// -buildvcs=auto over a GOFLAGS that turns it off: the binary
		// names the commit it was built from (onceq version).
		args := []string{"build", "-buildvcs=auto", "-o", binPath}
		if raceEnabled && os.Getenv("ONCEQ_RACE_BINARY") == "1" {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/onceq/onceq/cmd/onceq")...).CombinedOutput()
		if err != nil && strings.Contains(string(out), "VCS") {
			// A checkout git cannot read: built without its commit.
			args[1] = "-buildvcs=false"
			out, err = exec.Command("go", append(args, "github.com/onceq/onceq/cmd/onceq")...).CombinedOutput()
		}
		if err != nil {
			buildErr = &buildError{err: err, out: string(out)}
		}
	})
	if buildErr != nil {
		t.Fatalf("building onceq: %v", buildErr)
	}
	return binPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }
