// Command testprogress reads `go test -json` on stdin and prints, as they
// happen, each package's start and end with its time, and the output of
// each test that failed; it exits 1 if anything failed, and ends with the
// tests counted: "tests: N passed, N failed, N skipped", and the slowest
// top-level tests with their times. make test pipes
// the suite through it, so that a long run shows where it is.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	start := time.Now()
	var n counts
	failed := progress(os.Stdin, os.Stdout, func() time.Duration { return time.Since(start).Round(time.Second) }, &n)
	if failed > 0 {
		fmt.Printf("FAIL: %d package(s) or test(s) failed, in %v\n", failed, time.Since(start).Round(time.Second))
	} else {
		fmt.Printf("ok: every package passed, in %v\n", time.Since(start).Round(time.Second))
	}
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", n.passed, n.failed, n.skipped)
	printSlowest(os.Stdout, n.slow, slowest)
	if failed > 0 {
		os.Exit(1)
	}
}

// counts are the tests (not packages) that passed, failed and were
// skipped, and how long the top-level ones took.
type counts struct {
	passed, failed, skipped int
	slow                    []timed
}

// timed is a top-level test's time.
type timed struct {
	name    string // package and test
	elapsed float64
}

// slowest is how many tests printSlowest lists.
const slowest = 15

// printSlowest prints the k slowest of ts: where a suite's time goes.
func printSlowest(w io.Writer, ts []timed, k int) {
	slices.SortStableFunc(ts, func(a, b timed) int { return cmp.Compare(b.elapsed, a.elapsed) })
	if len(ts) > k {
		ts = ts[:k]
	}
	if len(ts) > 0 {
		fmt.Fprintf(w, "the %d slowest tests:\n", len(ts))
	}
	for _, x := range ts {
		fmt.Fprintf(w, "%8.1fs  %s\n", x.elapsed, x.name)
	}
}

// progress prints the events of r to w as main says, stamped with since,
// and returns how many packages and tests failed.
func progress(r io.Reader, w io.Writer, since func() time.Duration, n *counts) (failed int) {
	out := map[string][]string{} // package/test -> its output, until it ends
	running := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, sc.Text()) // not an event: a build error, say
			continue
		}
		key := e.Package + " " + e.Test
		stamp := since()
		switch e.Action {
		case "start":
			running[e.Package] = true
			fmt.Fprintf(w, "%8v  start %s (%d running)\n", stamp, e.Package, len(running))
		case "output", "build-output":
			out[key] = append(out[key], e.Output)
		case "pass", "skip":
			if e.Test != "" && !strings.Contains(e.Test, "/") {
				n.slow = append(n.slow, timed{e.Package + " " + e.Test, e.Elapsed})
			}
			switch {
			case e.Test != "" && e.Action == "pass":
				n.passed++
			case e.Test != "":
				n.skipped++
			}
			if e.Test == "" {
				delete(running, e.Package)
				word := "ok   "
				if e.Action == "skip" {
					word = "none " // no test files
				}
				fmt.Fprintf(w, "%8v  %s %s %.1fs\n", stamp, word, e.Package, e.Elapsed)
			}
			delete(out, key)
		case "fail":
			failed++
			if e.Test != "" {
				n.failed++
				if !strings.Contains(e.Test, "/") {
					n.slow = append(n.slow, timed{e.Package + " " + e.Test, e.Elapsed})
				}
			}
			if e.Test == "" {
				delete(running, e.Package)
				fmt.Fprintf(w, "%8v  FAIL  %s %.1fs\n", stamp, e.Package, e.Elapsed)
			} else {
				fmt.Fprintf(w, "%8v  FAIL  %s %s %.1fs\n", stamp, e.Package, e.Test, e.Elapsed)
			}
			fmt.Fprint(w, strings.Join(out[key], ""))
			delete(out, key)
		}
	}
	if sc.Err() != nil {
		fmt.Fprintf(w, "testprogress: reading the events: %v\n", sc.Err())
		failed++
	}
	return failed
}
