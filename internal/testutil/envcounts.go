package testutil

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// EnvCounts reads the environment variable name as comma-separated whole
// numbers from lo to hi (a benchmark's queue counts or backlogs), or
// returns def when it is unset. A value out of range or not a number
// fails tb, naming the variable and the range.
func EnvCounts(tb testing.TB, name string, def []int, lo, hi int) []int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			tb.Fatalf("%s=%q: want whole numbers from %d to %d, comma-separated", name, v, lo, hi)
		}
		out = append(out, n)
	}
	return out
}
