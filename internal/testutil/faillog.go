package testutil

import (
	"log/slog"
	"testing"
)

// failLogTail is how much of a failed test's log FailureLog prints: the
// end of it, where the failure is.
const failLogTail = 256 << 10

// FailureLog returns a debug-level logger whose output t prints, the last
// 256 KiB of it, only if t fails: what the code under test did before a
// failure that a quiet machine does not reproduce.
func FailureLog(t testing.TB) *slog.Logger {
	t.Helper()
	var buf SyncBuffer
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out := buf.String()
		if len(out) > failLogTail {
			out = "...\n" + out[len(out)-failLogTail:]
		}
		t.Logf("the log of the code under test:\n%s", out)
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
