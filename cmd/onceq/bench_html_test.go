package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/onceq/onceq/bench"
)

// TestWriteBenchHTML: onceq bench --report's page holds the table and the
// charts the report has data for, loads ECharts from its own directory
// alone, and lies beside the JSON report.
func TestWriteBenchHTML(t *testing.T) {
	hist := func(n int64) *bench.Distribution {
		return &bench.Distribution{Count: n, Histogram: []bench.Bucket{{LE: 1, Count: n / 2}, {LE: 10, Count: n - n/2}}}
	}
	r := &bench.Report{
		Version: bench.ReportVersion, Scenario: bench.Delay, Seed: 42, Broker: "embedded",
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Runs: []bench.RunResult{
			{Name: "onceq delay service", Records: 10, Seconds: 2, TasksPerSec: 5, Latency: hist(10), Lateness: hist(10),
				Timeline: []bench.Point{{T: 0.5, PerSec: 4}, {T: 1, PerSec: 6}}},
			{Name: "baseline", Baseline: true, Records: 10, Seconds: 1, TasksPerSec: 10, Latency: hist(10)},
		},
		OK: true,
	}
	dir := filepath.Join(t.TempDir(), "report")
	if err := writeBenchHTML(r, dir); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"echarts.min.js", "Throughput over time", "Latency distribution", "Lateness: publish time minus due time",
		"passed", "onceq delay service", "scenario delay", `href="report.json"`} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	// Every script comes from the report's directory: none from the
	// network.
	if m := regexp.MustCompile(`<script src="([^"]+)"`).FindAllSubmatch(html, -1); len(m) != 1 || string(m[0][1]) != "echarts.min.js" {
		t.Errorf("index.html's scripts: %q; want echarts.min.js alone", m)
	}
	if bytes.Contains(html, []byte("https://")) {
		t.Errorf("index.html refers to the network")
	}
	if js, err := os.ReadFile(filepath.Join(dir, "echarts.min.js")); err != nil || !bytes.Contains(js, []byte("echarts")) || len(js) < 500_000 {
		t.Errorf("echarts.min.js beside the report: %d bytes, %v", len(js), err)
	}
	f, err := os.Open(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := bench.ReadReport(f); err != nil {
		t.Fatal(err)
	}
}
