package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
		dir, err := binDir()
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "onceq")
		// Built aside and renamed over the last build: processes still
		// running the last one keep it, and the directory holds one
		// binary whatever the runs.
		out := filepath.Join(dir, fmt.Sprintf("onceq.%d", os.Getpid()))
		defer os.Remove(out)
		// -buildvcs=auto over a GOFLAGS that turns it off: the binary
		// names the commit it was built from (onceq version).
		args := []string{"build", "-buildvcs=auto", "-o", out}
		if raceEnabled && os.Getenv("ONCEQ_RACE_BINARY") == "1" {
			args = append(args, "-race")
		}
		log, err := exec.Command("go", append(args, "github.com/onceq/onceq/cmd/onceq")...).CombinedOutput()
		if err != nil && strings.Contains(string(log), "VCS") {
			// A checkout git cannot read: built without its commit.
			args[1] = "-buildvcs=false"
			log, err = exec.Command("go", append(args, "github.com/onceq/onceq/cmd/onceq")...).CombinedOutput()
		}
		if err != nil {
			buildErr = &buildError{err: err, out: string(log)}
			return
		}
		buildErr = os.Rename(out, binPath)
	})
	if buildErr != nil {
		t.Fatalf("building onceq: %v", buildErr)
	}
	return binPath
}

// binDir is where the test binaries of the checkout in the working
// directory build onceq: one directory per checkout (the library module's
// root, which holds the CLI's module and go.work), shared by the test
// binaries of both modules' packages and reused by every run, so that runs
// leave no binary of their own behind.
func binDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	root := checkoutRoot(wd)
	if raceEnabled && os.Getenv("ONCEQ_RACE_BINARY") == "1" {
		root += " race" // a binary of its own
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), "onceq-bin-"+hex.EncodeToString(sum[:6]))
	return dir, os.MkdirAll(dir, 0o755)
}

// libraryModule is the go.mod line of the checkout's root.
var libraryModule = regexp.MustCompile(`(?m)^module\s+"?github\.com/onceq/onceq"?\s*(//.*)?$`)

// checkoutRoot is the directory of the go.mod of module
// github.com/onceq/onceq at or above dir, the checkout's root whether dir
// is in the library's module or in a nested one (cmd/onceq,
// bench/watermill); else the nearest go.mod's directory; else dir.
func checkoutRoot(dir string) string {
	nearest := ""
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			if libraryModule.Match(b) {
				return d
			}
			if nearest == "" {
				nearest = d
			}
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	if nearest == "" {
		return dir
	}
	return nearest
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }
