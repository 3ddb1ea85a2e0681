package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// Tool returns the path of program name, a third-party tool a test
// drives, which .ci/run installs from the Debian package pkg. Under CI
// (CI=true), a missing tool fails the test; elsewhere the test is skipped
// with a hint.
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed; CI must have it (apt-get install %s): %v", name, pkg, err)
	}
	t.Skipf("%s is not installed: apt-get install %s to run this test", name, pkg)
	return ""
}

// Kcat returns the path of kcat, the third-party Kafka client the interop
// tests use.
func Kcat(t testing.TB) string { return Tool(t, "kcat", "kcat") }

// Curl returns the path of curl, the HTTP client the tests written from
// other systems' API documentation use.
func Curl(t testing.TB) string { return Tool(t, "curl", "curl") }
