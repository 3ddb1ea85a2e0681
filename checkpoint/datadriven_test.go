package checkpoint

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata/ files")

// A ddCase is one case of a datadriven test file:
//
//	# comments
//	command key=value key2=value2
//	input lines
//	----
//	expected output
//
// Cases are separated by blank lines; a blank output line is written ".".
type ddCase struct {
	pos      string
	comments []string
	cmd      string
	args     map[string]string
	input    string
	expected string
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

// runDataDriven runs fn on every case of the file and compares its output
// with the expected one; with -rewrite it writes the actual output back.
func runDataDriven(t *testing.T, path string, fn func(t *testing.T, c *ddCase) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cases := parseDataDriven(t, path, string(data))
	var out strings.Builder
	for i, c := range cases {
		// A blank line would end the output: show it as ".".
		lines := strings.Split(strings.TrimRight(fn(t, c), "\n"), "\n")
		for i, l := range lines {
			if l == "" {
				lines[i] = "."
			}
		}
		actual := strings.Join(lines, "\n")
		if !*rewrite && actual != c.expected {
			t.Errorf("%s: %s\nexpected:\n%s\nactual:\n%s", c.pos, c.cmd, c.expected, actual)
		}
		if i > 0 {
			out.WriteString("\n")
		}
		for _, l := range c.comments {
			out.WriteString(l + "\n")
		}
		out.WriteString(c.cmd)
		out.WriteString("\n")
		if c.input != "" {
			out.WriteString(c.input + "\n")
		}
		out.WriteString("----\n" + actual + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func parseDataDriven(t *testing.T, path, data string) []*ddCase {
	t.Helper()
	lines := strings.Split(strings.TrimRight(data, "\n"), "\n")
	var cases []*ddCase
	var comments []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			continue
		}
		c := &ddCase{pos: fmt.Sprintf("%s:%d", path, i+1), comments: comments, cmd: l, args: map[string]string{}}
		comments = nil
		for _, f := range strings.Fields(l)[1:] {
			k, v, _ := strings.Cut(f, "=")
			c.args[k] = v
		}
		var input []string
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			input = append(input, lines[i])
		}
		if i == len(lines) {
			t.Fatalf("%s: no ---- after the input", c.pos)
		}
		var output []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			output = append(output, lines[i])
		}
		c.input, c.expected = strings.Join(input, "\n"), strings.Join(output, "\n")
		cases = append(cases, c)
	}
	return cases
}

// name returns the command's name (its first word).
func (c *ddCase) name() string { return strings.Fields(c.cmd)[0] }
