package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain keeps the commands' view cache (--view-cache's default, in
// the user's cache directory) in a directory of the tests' own, removed
// after them, for the commands run in process and the onceq processes
// the tests start.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "onceq-cli-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_CACHE_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
