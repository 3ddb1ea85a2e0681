package main

import (
	"strings"
	"testing"
)

// TestTokenCommands: token create prints a token once, list shows its ID
// and never its secret, revoke removes it; bad input exits 2.
func TestTokenCommands(t *testing.T) {
	addr, _ := produceBroker(t)
	code, out, stderr := runCLI(t, "", "--brokers", addr, "token", "create", "shop", "--description", "checkout")
	tok := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(tok, "oq_") || len(tok) != 3+16+1+32 {
		t.Fatalf("token create: exit %d: %q %s", code, out, stderr)
	}
	id := tok[3:19]
	code, out, _ = runCLI(t, "", "--brokers", addr, "token", "list")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "shop") || !strings.Contains(out, "checkout") || strings.Contains(out, tok[20:]) {
		t.Fatalf("token list: exit %d\n%s", code, out)
	}
	if code, out, stderr = runCLI(t, "", "--brokers", addr, "token", "revoke", id); code != 0 || out != "revoked "+id+"\n" {
		t.Fatalf("token revoke: exit %d: %q %s", code, out, stderr)
	}
	if code, out, _ = runCLI(t, "", "--brokers", addr, "token", "list", "shop"); code != 0 || strings.Contains(out, id) {
		t.Fatalf("token list after revoke: exit %d\n%s", code, out)
	}
	if code, _, stderr = runCLI(t, "", "--brokers", addr, "token", "revoke", id); code != exitFailure || !strings.Contains(stderr, "no token has this ID") {
		t.Fatalf("revoke of a revoked token: exit %d: %s", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "create"}, "want one namespace"},
		{[]string{"token", "create", "a.b"}, `namespace "a.b"`},
		{[]string{"token", "create", "shop", "--description", strings.Repeat("d", 300)}, "--description of 300 bytes"},
		{[]string{"token", "revoke", "oq_123"}, "want the 16 hex digits"},
		{[]string{"token", "list", "a b"}, `namespace "a b"`},
		{[]string{"token", "account"}, "want one account name"},
		{[]string{"token", "account", "a:b"}, `account name "a:b"`},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
	if code, out, stderr := runCLI(t, "short\n", "token", "account", "ops"); code != exitUsage || out != "" || !strings.Contains(stderr, "fewer than 12 bytes") {
		t.Errorf("token account with a short password: exit %d, %q %q; want exit 2, nothing printed", code, out, stderr)
	}
}
