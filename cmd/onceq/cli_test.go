package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runCLI runs the CLI in-process and returns its exit code and output.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topics", "create", "q", "--partitions", "0"}, "--partitions 0: want 1 or more"},
		{[]string{"topics", "create", "a b"}, `queue "a b": invalid queue name`},
		{[]string{"topics", "create", "onceq-x"}, "reserved queue name"},
		{[]string{"topics", "create"}, "want one queue name"},
		{[]string{"topics", "create", "q", "--config", "novalue"}, "want key=value"},
		{[]string{"topics", "list", "--brokers", "nohostport"}, "want host:port"},
		{[]string{"topics", "list", "--sasl-mechanism", "GSSAPI", "--sasl-user", "u"}, "not supported"},
		{[]string{"topics", "list", "--tls-cert", "/x"}, "go together"},
		{[]string{"--log-level", "loud", "version"}, "--log-level"},
		{[]string{"--log-format", "xml", "version"}, "--log-format"},
		{[]string{"broker", "--partitions", "0"}, "--partitions 0"},
		{[]string{"broker", "--listen", "nope"}, "listen address"},
		{[]string{"version", "--bogus"}, "unknown flag"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"version", "extra"}, "no arguments"},
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
