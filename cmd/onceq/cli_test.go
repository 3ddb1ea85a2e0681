package main

import (
	"context"
	"net"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/onceq/onceq/internal/testutil"
)

// runCLI runs the CLI in-process and returns its exit code and output.
// Its outputs take writes from several goroutines at once (a command's
// progress and its clients' logs), as os.Stdout and os.Stderr do.
func runCLI(t testing.TB, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut testutil.SyncBuffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topics", "create", "q", "--partitions", "0"}, "--partitions 0: want 1 to 10000"},
		{[]string{"topics", "create", "a b"}, `queue "a b": invalid queue name`},
		{[]string{"topics", "create", "onceq-x"}, "reserved queue name"},
		{[]string{"topics", "create"}, "want one queue name"},
		{[]string{"topics", "create", "q", "--config", "novalue"}, "want key=value"},
		{[]string{"topics", "list", "--brokers", "nohostport"}, "want host:port"},
		// Issue 17: a port out of range was dialed, and the command exited 1.
		{[]string{"topics", "list", "--brokers", "127.0.0.1:99999"}, `--brokers: broker address "127.0.0.1:99999": the port is a number from 1 to 65535`},
		{[]string{"produce", "--queue", "q", "--brokers", "localhost:kafka", "x"}, "the port is a number from 1 to 65535"},
		{[]string{"dlq", "stats", "--brokers", "127.0.0.1:9092,127.0.0.1:0"}, `"127.0.0.1:0": the port is a number`},
		{[]string{"topics", "list", "--sasl-mechanism", "GSSAPI", "--sasl-user", "u"}, "not supported"},
		{[]string{"topics", "list", "--tls-cert", "/x"}, "go together"},
		{[]string{"--log-level", "loud", "version"}, "--log-level"},
		{[]string{"--log-format", "xml", "version"}, "--log-format"},
		{[]string{"broker", "--partitions", "0"}, "--partitions 0"},
		{[]string{"broker", "--listen", "nope"}, "listen address"},
		{[]string{"version", "--bogus"}, "unknown flag"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"version", "extra"}, "no arguments"},
		{[]string{"worker", "--queue", "q", "--handler", "noop", "--pprof", "--metrics-addr", ""}, "--pprof serves on --metrics-addr, which is empty"},
		{[]string{"worker", "--queue", "q", "--handler", "noop", "--pprof", "--metrics-addr", "0.0.0.0:9464"}, "give it a loopback address"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "onceq ") {
		t.Fatalf("exit %d, %q", code, out)
	}
}

// TestVersionNamesTheCommit: a binary built in a git checkout says which
// commit it was built from.
func TestVersionNamesTheCommit(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout, or no git: %v", err)
	}
	out, err := exec.Command(testutil.Binary(t), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := string(head[:12]); !strings.Contains(string(out), want) {
		t.Fatalf("onceq version printed %q, want it to name %q", out, want)
	}
}

func TestCommitOf(t *testing.T) {
	for _, c := range []struct {
		settings    []debug.BuildSetting
		rev, detail string
	}{
		{nil, "", ""},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-26T12:00:00Z"}, {Key: "vcs.modified", Value: "false"}},
			"0123456789ab", "0123456789ab 2026-11-26T12:00:00Z"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}, "abc", "abc+dirty"},
	} {
		if rev, detail := commitOf(c.settings); rev != c.rev || detail != c.detail {
			t.Errorf("commitOf(%v) = %q, %q; want %q, %q", c.settings, rev, detail, c.rev, c.detail)
		}
	}
}

// TestBusyMetricsPortExits1 pins issue 17's exit codes for a command that
// wraps every --metrics-addr error as bad input: a taken port is a
// failure, exit 1; a malformed address is bad input, exit 2.
func TestBusyMetricsPortExits1(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr := runCLI(t, "", "broker", "--listen", "127.0.0.1:0", "--data-dir", "", "--metrics-addr", ln.Addr().String())
	if code != exitFailure || !strings.Contains(stderr, "cannot listen") {
		t.Fatalf("a taken port: exit %d, stderr %q; want exit 1", code, stderr)
	}
	code, _, stderr = runCLI(t, "", "broker", "--listen", "127.0.0.1:0", "--data-dir", "", "--metrics-addr", "127.0.0.1:99999")
	if code != exitUsage || !strings.Contains(stderr, "invalid listen address") {
		t.Fatalf("a port out of range: exit %d, stderr %q; want exit 2", code, stderr)
	}
}

// cliOn returns a runner of onceq commands on the brokers at addr that
// fails the test unless a command exits 0, and returns its stdout.
func cliOn(t *testing.T, addr string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		code, out, stderr := runCLI(t, "", append([]string{"--brokers", addr}, args...)...)
		if code != 0 {
			t.Fatalf("onceq %s: exit %d: %s%s", strings.Join(args, " "), code, out, stderr)
		}
		return out
	}
}
