package deploy_test

import (
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/ops"
	"github.com/onceq/onceq/internal/testutil"
)

// flag is one command-line flag as the deployment files write it:
// --name=value, or --name alone for a boolean.
type flag struct {
	name, value string
	bare        bool // --name without =value
}

// command is an onceq command line: the command's name and its flags.
type command struct {
	name  string
	flags []flag
}

// parseCommand reads args, the command's name first, then flags written
// --name=value (or --name for a boolean): the one form that reads the
// same to the binary and to these tests.
func parseCommand(args []string) (command, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return command{}, fmt.Errorf("args %q: want the command (worker, serve, delay) first", args)
	}
	c := command{name: args[0]}
	for _, a := range args[1:] {
		name, ok := strings.CutPrefix(a, "--")
		if !ok || name == "" {
			return command{}, fmt.Errorf("argument %q: want a flag, --name=value", a)
		}
		n, v, hasValue := strings.Cut(name, "=")
		c.flags = append(c.flags, flag{name: n, value: v, bare: !hasValue})
	}
	return c, nil
}

// get returns the value of the flag name given last, as the binary reads
// it.
func (c command) get(name string) (string, bool) {
	for i := len(c.flags) - 1; i >= 0; i-- {
		if c.flags[i].name == name {
			return c.flags[i].value, true
		}
	}
	return "", false
}

// args writes the command line back.
func (c command) args() []string {
	out := []string{c.name}
	for _, f := range c.flags {
		if f.bare {
			out = append(out, "--"+f.name)
		} else {
			out = append(out, "--"+f.name+"="+f.value)
		}
	}
	return out
}

var shutdownDefaultRe = regexp.MustCompile(`--shutdown-timeout duration .*\(default ([^)]+)\)`)

// shutdownTimeout is how long the command waits for its work on SIGTERM:
// the --shutdown-timeout the command line gives, or the default its help
// names; 0 for a command without one.
func (c command) shutdownTimeout(help string) (time.Duration, error) {
	if v, ok := c.get("shutdown-timeout"); ok {
		return time.ParseDuration(v)
	}
	if m := shutdownDefaultRe.FindStringSubmatch(help); m != nil {
		return time.ParseDuration(m[1])
	}
	return 0, nil
}

// addrPort returns the port of an address flag's host:port value.
func addrPort(value string) (string, bool) {
	_, port, err := net.SplitHostPort(value)
	return port, err == nil && port != ""
}

// Flags by what they name: directories a process writes, and addresses it
// listens on.
var (
	dirFlags  = []string{"checkpoint-dir", "data-dir", "view-dir", "state-dir"}
	addrFlags = []string{"listen", "metrics-addr", "admin-listen"}
)

// checkFlags runs the real binary with c's command line and --help. Cobra
// parses every flag before it prints the help, so a flag the command does
// not have, or a value its type refuses (a duration, a number), exits 2
// naming it; a command that does not exist is refused too. It returns the
// help.
func checkFlags(t *testing.T, where string, c command) string {
	t.Helper()
	args := append(c.args(), "--help")
	out, err := exec.Command(testutil.Binary(t), args...).CombinedOutput()
	if err != nil {
		t.Errorf("%s: onceq %s: %v\n%s", where, strings.Join(args, " "), err, out)
		return ""
	}
	if usage := "Usage:\n  onceq " + c.name + " [flags]"; !strings.Contains(string(out), usage) {
		t.Errorf("%s: onceq %s printed no %q:\n%s", where, strings.Join(args, " "), usage, out)
	}
	// What the commands check of an address when they start, which
	// --help does not reach.
	for _, name := range addrFlags {
		if v, ok := c.get(name); ok {
			if err := ops.CheckAddr(name, v); err != nil {
				t.Errorf("%s: --%s: %v", where, name, err)
			}
		}
	}
	return string(out)
}

// isUnder says whether path is dir or inside it.
func isUnder(path, dir string) bool {
	dir = strings.TrimSuffix(dir, "/")
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// connFlag says whether a flag reaches the brokers through TLS or SASL,
// which the embedded broker the tests start speaks neither of.
func connFlag(name string) bool {
	return slices.ContainsFunc([]string{"tls", "sasl-"}, func(p string) bool { return strings.HasPrefix(name, p) })
}
