package main

import (
	"strings"
	"testing"
	"time"
)

// TestProgress: each package's start and end show as they come, a failed
// test with its output, a line that is no event as it is; failures count.
func TestProgress(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"a"}`,
		`{"Action":"start","Package":"b"}`,
		`{"Action":"run","Package":"a","Test":"TestX"}`,
		`{"Action":"output","Package":"a","Test":"TestX","Output":"    x_test.go:9: boom\n"}`,
		`{"Action":"fail","Package":"a","Test":"TestX","Elapsed":1.5}`,
		`{"Action":"output","Package":"b","Test":"TestY","Output":"quiet\n"}`,
		`{"Action":"pass","Package":"b","Test":"TestY/sub","Elapsed":9}`,
		`{"Action":"pass","Package":"b","Test":"TestY","Elapsed":0.1}`,
		`{"Action":"pass","Package":"b","Elapsed":0.2}`,
		`# a build error`,
		`{"Action":"fail","Package":"a","Elapsed":2}`,
		`{"Action":"skip","Package":"c"}`,
	}, "\n")
	var out strings.Builder
	var n counts
	failed := progress(strings.NewReader(in), &out, func() time.Duration { return time.Second }, &n)
	want := `      1s  start a (1 running)
      1s  start b (2 running)
      1s  FAIL  a TestX 1.5s
    x_test.go:9: boom
      1s  ok    b 0.2s
# a build error
      1s  FAIL  a 2.0s
      1s  none  c 0.0s
`
	if failed != 2 || out.String() != want {
		t.Fatalf("failed %d, printed:\n%s\nwant 2 and:\n%s", failed, out.String(), want)
	}
	if n.passed != 2 || n.failed != 1 || n.skipped != 0 {
		t.Fatalf("counted %+v, want 2 passed and 1 failed", n)
	}
	var slow strings.Builder
	printSlowest(&slow, n.slow, 1) // a subtest's time is its test's
	if want := "the 1 slowest tests:\n     1.5s  a TestX\n"; slow.String() != want {
		t.Fatalf("the slowest printed:\n%s\nwant:\n%s", slow.String(), want)
	}
}
