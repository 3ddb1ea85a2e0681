package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ReportVersion is the version of the JSON report format. ReadReport
// refuses other versions.
const ReportVersion = 1

// Report is the outcome of one bench invocation: what ran, on what, how
// fast, and whether the independent verification passed. It is written as
// JSON (WriteJSON) and as a table (WriteTable); onceq bench --report draws
// it as an HTML page with charts.
type Report struct {
	Version  int       `json:"version"`
	Scenario Scenario  `json:"scenario"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Seed     uint64    `json:"seed"`
	// Broker is "embedded" (in the bench's process), "process" (an onceq
	// broker subprocess the bench started) or "external" (--brokers).
	Broker  string  `json:"broker"`
	Machine Machine `json:"machine"`
	Config  Config  `json:"config"`
	// Runs are the measured runs: the primary one first, then the
	// baselines.
	Runs []RunResult `json:"runs"`
	// Ratios compare the primary run's throughput with each baseline's.
	Ratios []Ratio `json:"ratios,omitempty"`
	// Chaos counts what the chaos scenario killed.
	Chaos *ChaosStats `json:"chaos,omitempty"`
	// OK is true when every run's verification passed.
	OK bool `json:"ok"`
}

// Machine is where the bench ran.
type Machine struct {
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	CPUs        int    `json:"cpus"`
	MemoryBytes int64  `json:"memory_bytes"`
	Go          string `json:"go"`
}

// Config is the load the bench offered, with every default filled in.
type Config struct {
	Tasks          int     `json:"tasks"`
	Submissions    int     `json:"submissions"`
	Size           int     `json:"size"`
	Partitions     int     `json:"partitions"`
	Workers        int     `json:"workers"`
	Concurrency    int     `json:"concurrency"`
	CommitInterval string  `json:"commit_interval"`
	Guarantee      string  `json:"guarantee"`
	Duplicates     float64 `json:"duplicates"`
	Rate           int     `json:"rate"`
	MaxDelay       string  `json:"max_delay,omitempty"`
	KillBroker     bool    `json:"kill_broker,omitempty"`
	KillInterval   string  `json:"kill_interval,omitempty"`
	LaneQueues     int     `json:"lane_queues,omitempty"`
	// Work, Slow and SlowTasks are the handler-time profile (process and
	// e2e), absent when none: Work as a duration, Slow as "P%:D", and how
	// many distinct tasks are slow.
	Work      string `json:"work,omitempty"`
	Slow      string `json:"slow,omitempty"`
	SlowTasks int    `json:"slow_tasks,omitempty"`
}

// RunResult is one measured run: the system under test or a baseline.
type RunResult struct {
	Name     string `json:"name"`
	Baseline bool   `json:"baseline"`
	// Records is how many task records the run moved (submissions,
	// duplicates included); Seconds is from its first record to its last.
	Records     int     `json:"records"`
	Seconds     float64 `json:"seconds"`
	TasksPerSec float64 `json:"tasks_per_sec"`
	MBPerSec    float64 `json:"mb_per_sec"`
	// Latency is what the scenario measures per task (see the README);
	// absent where it means nothing (process drains a backlog).
	Latency *Distribution `json:"latency,omitempty"`
	// Lateness is the delay scenario's publish time minus due time.
	Lateness *Distribution `json:"lateness,omitempty"`
	// OfferedPerSec, KeptUp, TailSeconds and AllowedTailSeconds are the
	// e2e scenario's, absent elsewhere. OfferedPerSec is the submissions
	// over the submission span (first submission to last acknowledgment):
	// about Config.Rate when the producer keeps the pace, how fast it went
	// flat out. TailSeconds is from the last acknowledgment to the last
	// handler's finish (absent when 0). KeptUp is true when TailSeconds is
	// at most AllowedTailSeconds (see keptUpSlack): the workers ran the
	// tasks as fast as they came.
	OfferedPerSec      float64 `json:"offered_per_sec,omitempty"`
	KeptUp             *bool   `json:"kept_up,omitempty"`
	TailSeconds        float64 `json:"tail_seconds,omitempty"`
	AllowedTailSeconds float64 `json:"allowed_tail_seconds,omitempty"`
	// Timeline is the throughput over time, sampled every 500ms.
	Timeline     []Point       `json:"timeline,omitempty"`
	Verification *Verification `json:"verification,omitempty"`
}

// Distribution summarizes durations in milliseconds.
type Distribution struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	// Early counts negative values (recorded as 0): a task published or
	// visible before its due time.
	Early     int64    `json:"early"`
	Histogram []Bucket `json:"histogram,omitempty"`
}

// Bucket counts the values below LE milliseconds and at or above the
// previous bucket's LE.
type Bucket struct {
	LE    float64 `json:"le_ms"`
	Count int64   `json:"count"`
}

// Point is the throughput around time T (seconds from the run's start).
type Point struct {
	T      float64 `json:"t"`
	PerSec float64 `json:"per_sec"`
}

// Ratio is the primary run's throughput over a baseline's.
type Ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// ChaosStats counts the chaos scenario's kills and restarts.
type ChaosStats struct {
	WorkerKills int `json:"worker_kills"`
	BrokerKills int `json:"broker_kills"`
	// WorkerExits counts workers that exited by themselves (restarted).
	WorkerExits int `json:"worker_exits"`
}

func newReport(o *Options, started time.Time) *Report {
	r := &Report{
		Version: ReportVersion, Scenario: o.Scenario, Started: started.UTC().Truncate(time.Millisecond), Seed: o.Seed,
		Machine: Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), MemoryBytes: memTotal(), Go: runtime.Version()},
		Config: Config{Tasks: o.Tasks, Size: o.Size, Partitions: o.Partitions, Workers: o.Workers, Concurrency: o.Concurrency,
			CommitInterval: o.CommitInterval.String(), Guarantee: string(o.Guarantee), Duplicates: o.Duplicates, Rate: o.Rate},
	}
	if o.Work != 0 {
		r.Config.Work = o.Work.String()
	}
	if o.Slow != (Slow{}) {
		r.Config.Slow, r.Config.SlowTasks = o.Slow.String(), o.Slow.tasks(o.Tasks)
	}
	switch o.Scenario {
	case Delay:
		r.Config.MaxDelay = o.MaxDelay.String()
	case Chaos:
		r.Config.KillBroker, r.Config.KillInterval, r.Config.LaneQueues = o.KillBroker, o.KillInterval.String(), o.LaneQueues
	}
	return r
}

// finish fills in the ratios and the verdict.
func (r *Report) finish(started time.Time) {
	r.Seconds = round3(time.Since(started).Seconds())
	r.OK = true
	for _, run := range r.Runs {
		if run.Verification != nil && !run.Verification.OK {
			r.OK = false
		}
	}
	if len(r.Runs) == 0 || r.Runs[0].TasksPerSec == 0 {
		return
	}
	for _, b := range r.Runs[1:] {
		if b.Baseline && b.TasksPerSec > 0 {
			r.Ratios = append(r.Ratios, Ratio{Name: r.Runs[0].Name + " / " + b.Name, Value: round3(r.Runs[0].TasksPerSec / b.TasksPerSec)})
		}
	}
}

// Failures lists why the report is not OK, one line per failed check.
func (r *Report) Failures() []string {
	var out []string
	for _, run := range r.Runs {
		if v := run.Verification; v != nil {
			for _, p := range v.Problems {
				out = append(out, run.Name+": "+p)
			}
		}
	}
	return out
}

// newRun computes a run's rates from its record count and duration.
func newRun(name string, baseline bool, records, size int, took time.Duration) RunResult {
	s := max(took.Seconds(), 1e-9)
	return RunResult{Name: name, Baseline: baseline, Records: records, Seconds: round3(took.Seconds()),
		TasksPerSec: float64(int64(float64(records) / s)), MBPerSec: round3(float64(records) * float64(size) / 1e6 / s)}
}

// keptUpSlack is how long after the last submission the last task of a
// run that kept up may finish: a twentieth of the submission span, at
// least a second (a task waits for a fetch, its partition's turn and a
// commit interval even on an idle worker), plus the longest sleep of the
// profile, which a slow task submitted last needs by itself. A worker
// that falls behind builds a backlog that grows with the span, so its tail
// outgrows the twentieth however long the run.
func keptUpSlack(span, longestWork time.Duration) time.Duration {
	return max(time.Second, span/20) + longestWork
}

// setPace fills in an e2e run's offered rate and whether its workers kept
// up: submissions ran from start to submitted (the last acknowledgment),
// and the last handler finished at finished.
func (r *RunResult) setPace(start, submitted, finished time.Time, longestWork time.Duration) {
	span := submitted.Sub(start)
	tail := max(finished.Sub(submitted), 0)
	allowed := keptUpSlack(span, longestWork)
	kept := tail <= allowed
	r.OfferedPerSec = float64(int64(float64(r.Records) / max(span.Seconds(), 1e-9)))
	r.KeptUp, r.TailSeconds, r.AllowedTailSeconds = &kept, round3(tail.Seconds()), round3(allowed.Seconds())
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteJSONFile writes the report to path.
func (r *Report) WriteJSONFile(path string) error {
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench: writing the JSON report: %w", err)
	}
	return nil
}

// maxReportBytes bounds what ReadReport reads.
const maxReportBytes = 64 << 20

// ReadReport reads a JSON report written by WriteJSON, for tools that
// compare runs. It refuses unknown fields, other versions, trailing data and
// values no bench writes (negative counts, unknown scenarios).
func ReadReport(rd io.Reader) (*Report, error) {
	data, err := io.ReadAll(io.LimitReader(rd, maxReportBytes+1))
	if err != nil {
		return nil, fmt.Errorf("bench: reading a report: %w", err)
	}
	if len(data) > maxReportBytes {
		return nil, fmt.Errorf("bench: report is over %d bytes", maxReportBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Report
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("bench: decoding a report: %w", err)
	}
	if dec.More() {
		return nil, errors.New("bench: decoding a report: data after the report")
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("bench: report: %w", err)
	}
	return &r, nil
}

func (r *Report) check() error {
	if r.Version != ReportVersion {
		return fmt.Errorf("version %d: this onceq reads version %d", r.Version, ReportVersion)
	}
	if _, err := ParseScenario(string(r.Scenario)); err != nil {
		return err
	}
	if r.Seconds < 0 || r.Config.Tasks < 0 || r.Config.Submissions < 0 || r.Config.Size < 0 {
		return errors.New("negative duration or count")
	}
	for i, run := range r.Runs {
		if run.Records < 0 || run.Seconds < 0 || run.TasksPerSec < 0 || run.MBPerSec < 0 || run.OfferedPerSec < 0 ||
			run.TailSeconds < 0 || run.AllowedTailSeconds < 0 {
			return fmt.Errorf("run %d: negative count or rate", i)
		}
		if v := run.Verification; v != nil && (v.Expected < 0 || v.Records < 0 || v.Missing < 0 || v.Duplicates < 0) {
			return fmt.Errorf("run %d: negative verification count", i)
		}
	}
	return nil
}

// memTotal is the machine's memory from /proc/meminfo, or 0 where there is
// none.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
