package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/components"
	"github.com/go-echarts/go-echarts/v2/opts"

	"github.com/onceq/onceq/bench"
)

// writeBenchHTML writes dir/index.html, a page with the report's table and
// charts (throughput over time, the latency distribution and, for the
// delay scenario, the lateness histogram), dir/report.json, and
// dir/echarts.min.js: the charts are ECharts, made with go-echarts, and the
// page loads ECharts (5.6.0, Apache-2.0, embedded in the binary) from its
// own directory, never from the network. It is onceq bench --report's; the
// bench package writes the JSON and the table.
func writeBenchHTML(r *bench.Report, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: report directory: %w", err)
	}
	if err := r.WriteJSONFile(filepath.Join(dir, "report.json")); err != nil {
		return err
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		return err
	}
	var cs []components.Charter
	cs = append(cs, throughputChart(r))
	if c := distributionChart(r, "Latency distribution", func(run bench.RunResult) *bench.Distribution { return run.Latency }); c != nil {
		cs = append(cs, c)
	}
	if c := distributionChart(r, "Lateness: publish time minus due time", func(run bench.RunResult) *bench.Distribution { return run.Lateness }); c != nil {
		cs = append(cs, c)
	}
	page := components.NewPage()
	page.SetPageTitle("onceq bench: " + string(r.Scenario))
	page.AddCharts(cs...)
	page.ClearPresetJSAssets()
	page.AddCustomizedJSAssets(opts.EchartsJS)
	if err := os.WriteFile(filepath.Join(dir, opts.EchartsJS), echartsJS, 0o644); err != nil {
		return fmt.Errorf("bench: writing ECharts: %w", err)
	}
	var buf bytes.Buffer
	if err := page.Render(&buf); err != nil {
		return fmt.Errorf("bench: rendering the charts: %w", err)
	}
	html := bytes.Replace(buf.Bytes(), []byte("<body>"), append([]byte("<body>\n"), benchSummary(r, table.String())...), 1)
	if err := os.WriteFile(filepath.Join(dir, "index.html"), html, 0o644); err != nil {
		return fmt.Errorf("bench: writing the HTML report: %w", err)
	}
	return nil
}

// echartsJS is ECharts 5.6.0 (npm's echarts, dist/echarts.min.js;
// assets/ECHARTS-LICENSE), the version go-echarts renders for.
//
//go:embed assets/echarts.min.js
var echartsJS []byte

var benchSummaryTmpl = template.Must(template.New("summary").Parse(`<div style="font-family: sans-serif; margin: 20px auto; width: 900px">
<h1>onceq bench: {{.Scenario}}</h1>
<p>Verification: <strong>{{if .OK}}passed{{else}}FAILED{{end}}</strong>. Started {{.Started.Format "2006-01-02 15:04:05 MST"}}; the JSON report is <a href="report.json">report.json</a>.</p>
<pre style="font-size: 12px; overflow-x: auto">{{.Table}}</pre>
</div>
`))

func benchSummary(r *bench.Report, table string) []byte {
	var b bytes.Buffer
	_ = benchSummaryTmpl.Execute(&b, struct {
		*bench.Report
		Table string
	}{r, table})
	return b.Bytes()
}

func chartOpts(title string) []charts.GlobalOpts {
	return []charts.GlobalOpts{
		charts.WithInitializationOpts(opts.Initialization{Width: "900px", Height: "420px"}),
		charts.WithTitleOpts(opts.Title{Title: title}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Top: "30px"}),
	}
}

// throughputChart draws every run's timeline.
func throughputChart(r *bench.Report) *charts.Line {
	c := charts.NewLine()
	c.SetGlobalOptions(append(chartOpts("Throughput over time"),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: "s"}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "tasks/s"}))...)
	for _, run := range r.Runs {
		data := make([]opts.LineData, 0, len(run.Timeline))
		for _, p := range run.Timeline {
			data = append(data, opts.LineData{Value: []float64{p.T, p.PerSec}})
		}
		c.AddSeries(run.Name, data)
	}
	return c
}

// distributionChart draws the histograms that dist picks from the runs,
// or returns nil when no run has one.
func distributionChart(r *bench.Report, title string, dist func(bench.RunResult) *bench.Distribution) *charts.Bar {
	var les []float64
	for _, run := range r.Runs {
		if d := dist(run); d != nil {
			for _, b := range d.Histogram {
				if !slices.Contains(les, b.LE) {
					les = append(les, b.LE)
				}
			}
		}
	}
	if len(les) == 0 {
		return nil
	}
	slices.Sort(les)
	labels := make([]string, len(les))
	for i, le := range les {
		labels[i] = "< " + strconv.FormatFloat(le, 'g', -1, 64) + " ms"
	}
	c := charts.NewBar()
	c.SetGlobalOptions(append(chartOpts(title), charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "tasks"}))...)
	c.SetXAxis(labels)
	for _, run := range r.Runs {
		d := dist(run)
		if d == nil {
			continue
		}
		counts := make([]opts.BarData, len(les))
		for i := range counts {
			counts[i] = opts.BarData{Value: 0}
		}
		for _, b := range d.Histogram {
			counts[slices.Index(les, b.LE)] = opts.BarData{Value: b.Count}
		}
		c.AddSeries(run.Name, counts)
	}
	return c
}
