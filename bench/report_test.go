package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// sampleReport is a report as the delay scenario writes it, with every
// part filled in.
func sampleReport(t testing.TB) *Report {
	t.Helper()
	o, err := Options{Scenario: Delay, Tasks: 10, Seed: 42}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := newReport(&o, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r.Broker, r.Config.Submissions = brokerEmbedded, 10
	late, lat := newRecorder(), newRecorder()
	for i := range 10 {
		late.record(time.Duration(i) * time.Millisecond)
		lat.record(time.Duration(i*i) * time.Millisecond)
	}
	run := newRun(runDelaySvc, false, 10, o.Size, 2*time.Second)
	run.Lateness, run.Latency = late.summary(), lat.summary()
	run.Timeline = []Point{{T: 0.5, PerSec: 4}, {T: 1, PerSec: 6}}
	run.Verification = check(expectation{l: testLoad(t, 10, 0), once: true}, outputs(testLoad(t, 10, 0)))
	base := newRun("baseline", true, 10, o.Size, time.Second)
	r.Runs = []RunResult{run, base}
	r.Chaos = &ChaosStats{WorkerKills: 3, BrokerKills: 1}
	r.finish(time.Now())
	return r
}

func TestReportRoundTrip(t *testing.T) {
	r := sampleReport(t)
	if !r.OK || len(r.Ratios) != 1 || r.Ratios[0].Value != 0.5 {
		t.Fatalf("ok %v ratios %+v", r.OK, r.Ratios)
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip changed the report:\n%+v\n%+v", back, r)
	}
	for _, field := range []string{`"tasks_per_sec"`, `"p99_ms"`, `"le_ms"`, `"duplicates"`, `"missing"`, `"early"`, `"worker_kills"`, `"memory_bytes"`} {
		if !strings.Contains(buf.String(), field) {
			t.Errorf("JSON lacks %s", field)
		}
	}
}

func TestReadReportRefuses(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleReport(t).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.String()
	for name, s := range map[string]string{
		"unknown field": strings.Replace(good, `"seed"`, `"seeds"`, 1),
		"other version": strings.Replace(good, `"version": 1`, `"version": 2`, 1),
		"trailing data": good + "{}",
		"bad scenario":  strings.Replace(good, `"scenario": "delay"`, `"scenario": "fast"`, 1),
		"negative":      strings.Replace(good, `"missing": 0`, `"missing": -1`, 1),
		"not JSON":      "tasks/s 100",
		"empty":         "",
	} {
		if _, err := ReadReport(strings.NewReader(s)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.HasPrefix(err.Error(), "bench: ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
}

// FuzzReadReport: ReadReport never panics, and what it accepts writes back
// to JSON that reads back the same.
func FuzzReadReport(f *testing.F) {
	var buf bytes.Buffer
	if err := sampleReport(f).WriteJSON(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"version":1,"scenario":"chaos"}`))
	f.Add([]byte(`{"version":1,"scenario":"e2e","runs":[{"records":-1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ReadReport(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := r.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		back, err := ReadReport(&out)
		if err != nil {
			t.Fatalf("a report read back fails: %v\n%s", err, out.String())
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip changed the report")
		}
	})
}

func TestWriteJSONFileAndTable(t *testing.T) {
	r := sampleReport(t)
	path := filepath.Join(t.TempDir(), "report.json")
	if err := r.WriteJSONFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := ReadReport(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("report.json read back differs from the report")
	}
	var tab bytes.Buffer
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scenario delay", "seed 42", "baseline (baseline)", "ratio onceq delay service / baseline: 0.50",
		"0 early", "duplicates 0, missing 0", ": OK", "3 worker kills, 1 broker kills"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
}

func TestRecorder(t *testing.T) {
	r := newRecorder()
	if r.summary() != nil {
		t.Fatal("an empty recorder has a summary")
	}
	for i := 1; i <= 1000; i++ {
		r.record(time.Duration(i) * time.Millisecond)
	}
	r.record(-time.Millisecond)
	d := r.summary()
	if d.Count != 1001 || d.Early != 1 || d.P50 < 495 || d.P50 > 505 || d.P99 < 985 || d.P99 > 995 || d.Max < 999 || d.Max > 1001 {
		t.Fatalf("%+v", d)
	}
	var n int64
	for i, b := range d.Histogram {
		n += b.Count
		if i > 0 && b.LE <= d.Histogram[i-1].LE {
			t.Fatalf("bucket bounds %v then %v", d.Histogram[i-1].LE, b.LE)
		}
		if f := b.LE / 0.125; f != float64(int64(f)) || int64(f)&(int64(f)-1) != 0 {
			t.Fatalf("bucket bound %v is not 0.125 ms times a power of two", b.LE)
		}
	}
	if n != d.Count {
		t.Fatalf("histogram holds %d of %d", n, d.Count)
	}
	var nilRec *recorder
	if nilRec.summary() != nil {
		t.Fatal("a nil recorder has a summary")
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{Scenario: Chaos, Binary: "/bin/sh"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Tasks != DefaultTasks || o.Workers != 3 || o.Size != DefaultSize || o.Seed == 0 || o.Guarantee != "exactly-once" {
		t.Fatalf("defaults %+v", o)
	}
	// A chaos run is paced over 6 kill intervals unless given a rate;
	// other scenarios run flat out.
	if o.Rate != DefaultTasks/6 {
		t.Fatalf("chaos default rate %d, want %d", o.Rate, DefaultTasks/6)
	}
	if o, err := (Options{Scenario: Chaos, Binary: "/bin/sh", Rate: 5, KillInterval: 2 * time.Second}).withDefaults(); err != nil || o.Rate != 5 {
		t.Fatalf("chaos with a rate: %d, %v", o.Rate, err)
	}
	if o, err := (Options{Scenario: E2E}).withDefaults(); err != nil || o.Rate != 0 {
		t.Fatalf("e2e default rate %d, %v; want 0 (flat out)", o.Rate, err)
	}
	for _, bad := range []Options{
		{Scenario: "fast"},
		{Scenario: Process, Tasks: -1},
		{Scenario: Process, Size: 4},
		{Scenario: Process, Duplicates: 1.5},
		{Scenario: Process, Guarantee: "maybe"},
		{Scenario: Produce, KillBroker: true},
		{Scenario: Chaos, Guarantee: "at-least-once", Binary: "/bin/sh"},
		{Scenario: Chaos, Binary: "/nonexistent/onceq"},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestProgress(t *testing.T) {
	for _, redraw := range []bool{true, false} {
		var buf testutil.SyncBuffer
		p := NewProgress(&buf, redraw)
		p.every = 10 * time.Millisecond
		end := p.phase("drain", 100, func() int64 { return 50 })
		time.Sleep(50 * time.Millisecond)
		end()
		out := buf.String()
		want := "drain: 50/100 (50%)"
		if redraw {
			want = "\r\033[Kdrain [===============>              ]  50% 50/100"
		}
		if !strings.Contains(out, want) || !strings.Contains(out, "drain: 50/100 in ") {
			t.Errorf("redraw %v: %q lacks %q or the final line", redraw, out, want)
		}
	}
	var none *Progress
	none.logf("nothing")
	none.phase("x", 1, func() int64 { return 0 })()
}
