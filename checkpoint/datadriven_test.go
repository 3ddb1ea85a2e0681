package checkpoint

import (
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// A ddCase is one case of a datadriven test file (cockroachdb/datadriven,
// as delay's planner tests use; -rewrite regenerates the expected output):
//
//	# comments
//	command positional key=value
//	input lines
//	----
//	expected output
//
// A blank output line is written ".", so that outputs never need
// datadriven's double-separator form.
type ddCase struct {
	pos   string
	cmd   string // the whole command line
	args  map[string]string
	input string
}

// arg returns the value of key, failing the test if it is missing.
func (c *ddCase) arg(t *testing.T, key string) string {
	t.Helper()
	v, ok := c.args[key]
	if !ok {
		t.Fatalf("%s: %s: missing argument %s=", c.pos, c.cmd, key)
	}
	return v
}

// name returns the command's name (its first word).
func (c *ddCase) name() string { return strings.Fields(c.cmd)[0] }

// runDataDriven runs fn on every case of the file and compares its output
// with the expected one; with -rewrite it writes the actual output back.
func runDataDriven(t *testing.T, path string, fn func(t *testing.T, c *ddCase) string) {
	t.Helper()
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		c := &ddCase{pos: d.Pos, cmd: d.FullCmd(), args: map[string]string{}, input: d.Input}
		for _, a := range d.CmdArgs {
			c.args[a.Key] = strings.Join(a.Vals, ",")
		}
		lines := strings.Split(strings.TrimRight(fn(t, c), "\n"), "\n")
		for i, l := range lines {
			if l == "" {
				lines[i] = "."
			}
		}
		return strings.Join(lines, "\n") + "\n"
	})
}
