package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/bench"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/internal/testutil"
)

func TestBenchUsageErrorsExit2(t *testing.T) {
	t.Setenv("ONCEQ_BROKERS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "fast"}, `--scenario "fast"`},
		{[]string{"--tasks", "0"}, "--tasks 0: want 1 to"},
		{[]string{"--size", "7"}, "--size 7: want 8 to"},
		{[]string{"--partitions", "0"}, "--partitions 0"},
		{[]string{"--workers", "-1"}, "--workers -1"},
		{[]string{"--concurrency", "0"}, "--concurrency 0"},
		{[]string{"--commit-interval", "0s"}, "--commit-interval 0s"},
		{[]string{"--guarantee", "maybe"}, "--guarantee"},
		{[]string{"--duplicates", "1.5"}, "--duplicates 1.5"},
		{[]string{"--duplicates", "NaN"}, "--duplicates NaN"},
		{[]string{"--rate", "-5"}, "--rate -5"},
		{[]string{"--scenario", "delay", "--delay", "0s"}, "--delay 0s"},
		{[]string{"--scenario", "chaos", "--kill-interval", "10ms"}, "--kill-interval 10ms"},
		{[]string{"--scenario", "chaos", "--guarantee", "at-least-once"}, "chaos verifies exactly-once"},
		{[]string{"--scenario", "produce", "--rate", "100"}, "--rate does not apply to --scenario produce"},
		{[]string{"--scenario", "process", "--kill-broker"}, "--kill-broker does not apply"},
		{[]string{"--scenario", "e2e", "--delay", "1s"}, "--delay does not apply"},
		{[]string{"--scenario", "e2e", "--lane-queues", "10"}, "--lane-queues does not apply to --scenario e2e: it applies to chaos"},
		{[]string{"--scenario", "chaos", "--lane-queues", "10001"}, "--lane-queues 10001: want 0 to 10000"},
		{[]string{"--scenario", "produce", "--workers", "2"}, "--workers does not apply"},
		{[]string{"--scenario", "chaos", "--kill-broker", "--brokers", "127.0.0.1:1"}, "leave --brokers"},
		{[]string{"--scenario", "chaos", "--binary", "/nonexistent/onceq"}, "--binary"},
		{[]string{"--json", "/nonexistent/dir/r.json"}, "--json"},
		{[]string{"--brokers", "nohostport"}, "want host:port"},
		{[]string{"extra"}, "no arguments"},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"bench"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("onceq bench %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
	// Brokers from the environment count as given, as from the flag.
	t.Setenv("ONCEQ_BROKERS", "127.0.0.1:1")
	if code, _, stderr := runCLI(t, "", "bench", "--scenario", "chaos", "--kill-broker"); code != exitUsage || !strings.Contains(stderr, "leave --brokers") {
		t.Errorf("ONCEQ_BROKERS=127.0.0.1:1 onceq bench --scenario chaos --kill-broker: exit %d, stderr %q; want exit 2 and %q", code, stderr, "leave --brokers")
	}
}

// TestBenchProfileUsageErrorsExit2: a bad --work or --slow, or one given
// to a scenario whose handlers the bench does not run, exits 2 with a
// message that names the flag and, for a bad value, shows a good one.
func TestBenchProfileUsageErrorsExit2(t *testing.T) {
	t.Setenv("ONCEQ_BROKERS", "")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--slow", "5"}, []string{`--slow: bench: slow "5": want P%:D`, "for example 1%:1s"}},
		{[]string{"--slow", "1%"}, []string{`--slow: bench: slow "1%": want P%:D`, "for example 1%:1s"}},
		{[]string{"--slow", "101%:1s"}, []string{"--slow: bench: slow 101%:1s: percentage 101: want 0 to 100", "for example 1%:1s"}},
		{[]string{"--slow", "1%:-1s"}, []string{"--slow: bench: slow 1%:-1s: duration -1s: want 0 to 20s", "for example 1%:1s"}},
		{[]string{"--slow", "x%:1s"}, []string{"--slow: ", `percentage "x" is not a number`, "for example 1%:1s"}},
		{[]string{"--scenario", "process", "--slow", "1%:1m"}, []string{"--slow: ", "duration 1m0s: want 0 to 20s"}},
		{[]string{"--work", "fast"}, []string{`--work: bench: work "fast": want a duration from 0 to 20s, for example 20ms`}},
		{[]string{"--work", "-20ms"}, []string{"--work: bench: work -20ms: want a duration from 0 to 20s", "for example 20ms"}},
		{[]string{"--scenario", "chaos", "--slow", "1%:1s"}, []string{"--slow does not apply to --scenario chaos: it applies to process and e2e"}},
		{[]string{"--scenario", "produce", "--work", "20ms"}, []string{"--work does not apply to --scenario produce: it applies to process and e2e"}},
		{[]string{"--scenario", "delay", "--slow", "1%:1s"}, []string{"--slow does not apply to --scenario delay"}},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"bench"}, tc.args...)...)
		for _, want := range tc.want {
			if code != exitUsage || !strings.Contains(stderr, want) {
				t.Errorf("onceq bench %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stderr, want)
			}
		}
	}
}

// TestBenchE2EWorkProfile runs e2e with handlers that work, a few of them
// long: both runs report the same profile, whether they kept up with the
// offered rate, and verify.
func TestBenchE2EWorkProfile(t *testing.T) {
	t.Setenv("ONCEQ_BROKERS", "")
	out := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := runCLI(t, "", "bench", "--scenario", "e2e", "--tasks", "1000", "--rate", "500", "--work", "5ms",
		"--slow", "1%:300ms", "--concurrency", "64", "--seed", "7", "--json", out)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	r := readReport(t, out)
	if !r.OK || r.Config.Work != "5ms" || r.Config.Slow != "1%:300ms" || r.Config.SlowTasks != 10 || len(r.Runs) != 2 {
		t.Fatalf("ok %v, config %+v, %d runs\n%s", r.OK, r.Config, len(r.Runs), stdout)
	}
	for _, run := range r.Runs {
		if run.KeptUp == nil || run.OfferedPerSec <= 0 || run.AllowedTailSeconds < 1.3 || run.Latency == nil {
			t.Fatalf("%s: kept up %v, offered %v/s, allowed tail %vs, latency %+v", run.Name, run.KeptUp, run.OfferedPerSec, run.AllowedTailSeconds, run.Latency)
		}
	}
	for _, want := range []string{"work 5ms, slow 1%:300ms (10 tasks)", "kept up", "offered "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	t.Logf("%s", stdout)
}

// TestBenchVerificationFailsExit1 drops one output record before the
// verifier sees it: the verification must fail and the CLI exit 1.
func TestBenchVerificationFailsExit1(t *testing.T) {
	t.Setenv("ONCEQ_BROKERS", "")
	dropped := false
	benchTestHook = func(o *bench.Options) {
		o.Tamper = func(recs []*kgo.Record) []*kgo.Record {
			if !dropped && len(recs) > 0 {
				dropped = true
				return recs[1:]
			}
			return recs
		}
	}
	defer func() { benchTestHook = nil }()
	out := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := runCLI(t, "", "bench", "--scenario", "process", "--tasks", "500", "--baselines=false", "--json", out)
	if code != exitFailure || !strings.Contains(stderr, "verification failed") || !strings.Contains(stderr, "1 missing") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	r := readReport(t, out)
	if r.OK || r.Runs[0].Verification.Missing != 1 || r.Runs[0].Verification.Unique != 499 {
		t.Fatalf("report: ok %v, verification %+v", r.OK, r.Runs[0].Verification)
	}
}

func readReport(t *testing.T, path string) *bench.Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := bench.ReadReport(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runScenario runs a scenario twice, on the bench's own broker and with
// --brokers at a separately started "onceq broker", and checks that each
// run exits 0 and verifies.
func runScenario(t *testing.T, check func(*testing.T, *bench.Report), args ...string) {
	t.Helper()
	t.Setenv("ONCEQ_BROKERS", "")
	for _, external := range []bool{false, true} {
		name := "embedded"
		a := append([]string{"bench", "--seed", "7"}, args...)
		if external {
			name = "external"
			_, addr := testutil.StartBrokerProcess(t, "", t.TempDir())
			a = append(a, "--brokers", addr)
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			a := append(a, "--json", filepath.Join(dir, "r.json"), "--report", filepath.Join(dir, "html"))
			code, stdout, stderr := runCLI(t, "", a...)
			if code != 0 {
				t.Fatalf("onceq %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(a, " "), code, stdout, stderr)
			}
			r := readReport(t, filepath.Join(dir, "r.json"))
			want := map[bool]string{false: "embedded", true: "external"}[external]
			if !r.OK || r.Broker != want || r.Seed != 7 || len(r.Runs) == 0 {
				t.Fatalf("report: ok %v, broker %s, seed %d, %d runs\n%s", r.OK, r.Broker, r.Seed, len(r.Runs), stdout)
			}
			for _, run := range r.Runs {
				if v := run.Verification; v != nil && (v.Missing != 0 || (!v.DuplicatesAllowed && v.Duplicates != 0)) {
					t.Fatalf("%s: %+v", run.Name, v)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "html", "index.html")); err != nil {
				t.Fatal(err)
			}
			if check != nil {
				check(t, r)
			}
			t.Logf("%s", stdout)
		})
	}
}

func TestBenchProduce(t *testing.T) {
	runScenario(t, nil, "--scenario", "produce", "--tasks", "3000", "--duplicates", "0.1")
}

func TestBenchProcess(t *testing.T) {
	runScenario(t, nil, "--scenario", "process", "--tasks", "2000", "--duplicates", "0.1", "--workers", "2")
}

func TestBenchE2E(t *testing.T) {
	runScenario(t, nil, "--scenario", "e2e", "--tasks", "2000", "--rate", "2000", "--duplicates", "0.05")
}

func TestBenchDelay(t *testing.T) {
	runScenario(t, nil, "--scenario", "delay", "--tasks", "1000", "--delay", "3s", "--rate", "1000")
}

// TestBenchChaos is the acceptance run of the chaos scenario, scaled to a
// few minutes under -race: worker processes SIGKILLed every second or so;
// duplicates and missing must be 0.
func TestBenchChaos(t *testing.T) {
	tasks, rate := "20000", "2000"
	if testing.Short() {
		// Spread over 6 s: fewer tasks, as many kills.
		tasks, rate = "3000", "500"
	}
	runScenario(t, enoughKills, "--scenario", "chaos", "--tasks", tasks, "--rate", rate, "--kill-interval", "1s", "--duplicates", "0.05",
		"--binary", testutil.Binary(t))
}

// enoughKills fails a chaos run with fewer than 3 worker kills: it tested
// no crashes.
func enoughKills(t *testing.T, r *bench.Report) {
	if r.Chaos == nil || r.Chaos.WorkerKills < 3 {
		t.Fatalf("chaos %+v: too few kills to test crashes", r.Chaos)
	}
}

// TestBenchChaosLaneQueues is TestBenchChaos with the tasks spread over
// 500 lane queues of one lane, run by workers of a label pattern.
func TestBenchChaosLaneQueues(t *testing.T) {
	tasks, rate := "10000", "1500"
	if testing.Short() {
		tasks, rate = "3000", "500"
	}
	kills := func(t *testing.T, r *bench.Report) {
		enoughKills(t, r)
		if r.Config.LaneQueues != 500 {
			t.Fatalf("the report's lane queues: %d, want 500", r.Config.LaneQueues)
		}
	}
	runScenario(t, kills, "--scenario", "chaos", "--lane-queues", "500", "--tasks", tasks, "--rate", rate, "--kill-interval", "1s",
		"--duplicates", "0.05", "--binary", testutil.Binary(t))
}

// TestBenchChaosTooShortFails: a chaos run over before a kill tested
// nothing and must not pass.
func TestBenchChaosTooShortFails(t *testing.T) {
	t.Setenv("ONCEQ_BROKERS", "")
	code, stdout, stderr := runCLI(t, "", "bench", "--scenario", "chaos", "--tasks", "300", "--rate", "100000", "--kill-interval", "10s", "--binary", testutil.Binary(t))
	if code != exitFailure || !strings.Contains(stderr, "too short to test crashes") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestBenchChaosKillBroker kills the broker process too, every third kill.
func TestBenchChaosKillBroker(t *testing.T) {
	t.Setenv("ONCEQ_BROKERS", "")
	out := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := runCLI(t, "", "bench", "--scenario", "chaos", "--kill-broker", "--tasks", "10000", "--rate", "1000",
		"--binary", testutil.Binary(t), "--json", out)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	r := readReport(t, out)
	if r.Broker != "process" || r.Chaos.BrokerKills == 0 || !r.OK {
		t.Fatalf("broker %s, chaos %+v, ok %v", r.Broker, r.Chaos, r.OK)
	}
	t.Logf("%s", stdout)
}

// TestBenchRunsHeader: the chaos verifier reads the run counter that the
// worker's count: handler writes.
func TestBenchRunsHeader(t *testing.T) {
	if bench.RunsHeader != handlers.RunsHeader {
		t.Fatalf("bench reads %q, the count: handler writes %q", bench.RunsHeader, handlers.RunsHeader)
	}
}
