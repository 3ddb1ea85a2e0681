package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// Kcat returns the path of kcat, the third-party Kafka client the interop
// tests use. Under CI (CI=true), a missing kcat fails the test: .ci/run
// installs it. Elsewhere the test is skipped with a hint.
func Kcat(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("kcat is not installed; CI must have it (apt-get install kcat): %v", err)
	}
	t.Skip("kcat is not installed: apt-get install kcat to run the interop tests")
	return ""
}
