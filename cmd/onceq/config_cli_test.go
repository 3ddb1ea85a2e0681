package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/onceq/onceq/consumer"
)

// workerArgs runs a worker that the library refuses before it connects
// (its options are checked first), so that the value that won shows in
// the error. Its checkpoint directory must not be created.
func workerArgs(t *testing.T) (args []string, checkpointDir string) {
	dir := filepath.Join(t.TempDir(), "cp")
	return []string{"worker", "--queue", "q", "--handler", "noop", "--checkpoint-dir", dir, "--metrics-addr", ""}, dir
}

// TestConfigPrecedence: a flag wins over ONCEQ_<FLAG>, which wins over the
// file, which wins over the default; in the worker's own run and in
// config print. --config wins over ONCEQ_CONFIG.
func TestConfigPrecedence(t *testing.T) {
	clearEnv(t)
	file := writeConfig(t, "[worker]\nconcurrency = -1\nmax-attempts = 9\n")
	other := writeConfig(t, "[worker]\nconcurrency = -4\n")
	base, dir := workerArgs(t)
	for _, tc := range []struct {
		name      string
		env       string // ONCEQ_CONCURRENCY
		envConfig string // ONCEQ_CONFIG
		args      []string
		want      string // in the worker's error
		print     string // config print's line
	}{
		{"flag", "-2", file, []string{"--concurrency", "-3"}, "--concurrency -3:", "concurrency = -3  # flag"},
		{"env", "-2", file, nil, "--concurrency -2:", "concurrency = -2  # env ONCEQ_CONCURRENCY"},
		{"file", "", file, nil, "--concurrency -1:", "concurrency = -1  # file " + file + " line 2"},
		{"--config over ONCEQ_CONFIG", "", file, []string{"--config", other}, "--concurrency -4:", "concurrency = -4  # file " + other + " line 2"},
		{"default", "", "", []string{"--max-attempts", "0"}, "--max-attempts 0:", fmt.Sprintf("concurrency = %d  # default", consumer.DefaultConcurrency)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ONCEQ_CONCURRENCY", tc.env)
			t.Setenv("ONCEQ_CONFIG", tc.envConfig)
			code, _, stderr := runCLI(t, "", append(base, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
			code, out, stderr := runCLI(t, "", append([]string{"config", "print"}, append(base, tc.args...)...)...)
			if code != exitOK || !regexp.MustCompile(`(?m)^`+strings.ReplaceAll(regexp.QuoteMeta(tc.print), "  ", " +")+`$`).MatchString(out) {
				t.Errorf("config print: exit %d, stderr %q; want a line %q in:\n%s", code, stderr, tc.print, out)
			}
		})
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the refused worker created its checkpoint directory: %v", err)
	}
}

// TestConfigRefusesUnknownKeys: a key that is no flag of its command, a
// table that is no command, and the file naming another are refused with
// their names and lines, all at once, before anything runs.
func TestConfigRefusesUnknownKeys(t *testing.T) {
	clearEnv(t)
	file := writeConfig(t, `brokerz = "k:9092"
config = "other.toml"

[worker]
concurence = 8

[wokrer]
queue = ["q"]

[periodic.run]
lead = "5s"
leed = "5s"
`)
	args, dir := workerArgs(t)
	code, _, stderr := runCLI(t, "", append(args, "--config", file)...)
	for _, want := range []string{
		file + " line 1: brokerz: no such global flag or command of onceq; did you mean brokers?",
		file + " line 2: config: a config file does not name another",
		file + " line 5: [worker] concurence: no such flag of onceq worker; did you mean concurrency?",
		file + " line 7: [wokrer]: no such command onceq wokrer; did you mean worker?",
		file + " line 12: [periodic.run] leed: no such flag of onceq periodic run; did you mean lead?",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the worker ran: its checkpoint directory exists (%v)", err)
	}
	// The whole file is checked, whatever command runs.
	if code, _, stderr := runCLI(t, "", "version", "--config", file); code != exitUsage || !strings.Contains(stderr, "concurence") {
		t.Errorf("onceq version: exit %d, stderr %q; want 2 naming concurence", code, stderr)
	}
}

// TestConfigBadValueNamesItsSource: a value the flag does not parse is
// refused with the variable, or the file and line, and the flag.
func TestConfigBadValueNamesItsSource(t *testing.T) {
	clearEnv(t)
	args, dir := workerArgs(t)
	for _, tc := range []struct {
		name, env, file string
		want            []string
	}{
		{"env", "abc", "", []string{`ONCEQ_CONCURRENCY="abc": --concurrency wants a whole number`}},
		{"file", "", "# the worker\n[worker]\nconcurrency = \"abc\"\nhandler = [\"noop\"]\n[serve]\nretention = 30\n", []string{
			`onceq.toml line 3: [worker] concurrency = "abc": --concurrency wants a whole number`,
			"onceq.toml line 4: [worker] handler: --handler takes one value, not a list",
			`onceq.toml line 6: [serve] retention = "30": --retention wants a duration such as 30s`,
		}},
		{"syntax", "", "[worker]\nconcurrency = \n", []string{"onceq.toml line 2: ", "(the file is TOML)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ONCEQ_CONCURRENCY", tc.env)
			t.Setenv("ONCEQ_CONFIG", "")
			if tc.file != "" {
				t.Setenv("ONCEQ_CONFIG", writeConfig(t, tc.file))
			}
			code, _, stderr := runCLI(t, "", args...)
			for _, want := range tc.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
		})
	}
	if code, _, stderr := runCLI(t, "", "version", "--config", filepath.Join(t.TempDir(), "none.toml")); code != exitUsage || !strings.Contains(stderr, "--config: open ") {
		t.Errorf("a missing file: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the worker ran: its checkpoint directory exists (%v)", err)
	}
}

// TestConfigPrintMasksSecrets: config print shows the password flags and
// URLs' passwords masked, from every source, and connects to nothing.
func TestConfigPrintMasksSecrets(t *testing.T) {
	clearEnv(t)
	t.Setenv("ONCEQ_SASL_PASSWORD", "hunter2")
	t.Setenv("ONCEQ_CONFIG", writeConfig(t, "brokers = \"127.0.0.1:1\"\n[worker]\nhandler = \"http:https://ada:s3cret@example.com/run\"\n"))
	code, out, stderr := runCLI(t, "", "config", "print", "worker", "--tls-key", "client.key")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, secret := range []string{"hunter2", "s3cret"} {
		if strings.Contains(out, secret) {
			t.Errorf("config print shows %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{
		`sasl-password = "********"`, "# env ONCEQ_SASL_PASSWORD, masked",
		`handler = "http:https://ada:********@example.com/run"`,
		`tls-key = "client.key"`, // a path, not a secret
		"[worker]", `# config = "`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := runCLI(t, "", "config", "print", "worker", "--sasl-password", "hunter2"); !strings.Contains(out, `sasl-password = "********"`) || code != 0 {
		t.Errorf("a password from the command line: exit %d:\n%s", code, out)
	}
}

func TestSecretFlag(t *testing.T) {
	for name, want := range map[string]bool{
		"sasl-password": true, "api-token": true, "client-secret": true,
		"tls-key": false, "key": false, "token-file": false, "insecure-no-auth": false, "keep": false,
	} {
		if got := secretFlag(name); got != want {
			t.Errorf("secretFlag(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestConfigPrintIsAConfigFile: what config print prints loads as a config
// file, and gives the command the same values.
func TestConfigPrintIsAConfigFile(t *testing.T) {
	clearEnv(t)
	args := []string{"config", "print", "periodic", "run", "--lead", "3s", "--brokers", "k1:9092,k2:9092"}
	_, out, stderr := runCLI(t, "", args...)
	t.Setenv("ONCEQ_CONFIG", writeConfig(t, out))
	code, again, _ := runCLI(t, "", args[:4]...)
	if code != exitOK {
		t.Fatalf("config print's output as a config file: exit %d: %s", code, stderr)
	}
	strip := regexp.MustCompile(` *#.*`)
	if a, b := strip.ReplaceAllString(out, ""), strip.ReplaceAllString(again, ""); a != b {
		t.Errorf("the values differ read back from the file:\n%s\nwant:\n%s", b, a)
	}
}

// TestReadmeConfigExample: the README's example config file loads, and
// its values reach the commands.
func TestReadmeConfigExample(t *testing.T) {
	clearEnv(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Configuration\n")
	if !ok {
		t.Fatal("README.md has no Configuration section")
	}
	_, example, ok := strings.Cut(section, "```toml\n")
	example, _, ok2 := strings.Cut(example, "```\n")
	if !ok || !ok2 {
		t.Fatal("README.md's Configuration section has no toml example")
	}
	t.Setenv("ONCEQ_CONFIG", writeConfig(t, example))
	for _, cmd := range []string{"worker", "serve"} {
		code, out, stderr := runCLI(t, "", "config", "print", cmd)
		if code != exitOK {
			t.Fatalf("README.md's example config: onceq config print %s: exit %d: %s", cmd, code, stderr)
		}
		if !strings.Contains(out, "# file ") {
			t.Errorf("onceq config print %s takes nothing from the README's example:\n%s", cmd, out)
		}
	}
}

func TestKeyLines(t *testing.T) {
	got := keyLines([]byte(`a = 1
# c = 2
[worker]
 "queue" = ["x",
   "y = z"]
max.x = 3
[ periodic . 'run' ]
lead="1s"
`))
	for key, want := range map[string]int{"a": 1, "worker": 3, "worker.queue": 4, "worker.max.x": 6, "worker.max": 6,
		"periodic": 7, "periodic.run": 7, "periodic.run.lead": 8, "c": 0} {
		if got[key] != want {
			t.Errorf("line of %s: %d, want %d", key, got[key], want)
		}
	}
}

// TestStrayEnvWarns: an ONCEQ_ variable that names no flag of any command
// is ignored with a warning naming it and the nearest that does; one
// naming a flag of another command is not stray.
func TestStrayEnvWarns(t *testing.T) {
	clearEnv(t)
	t.Setenv("ONCEQ_CONCURENCY", "8")
	t.Setenv("ONCEQ_QUEUE", "emails") // the worker's, not version's
	code, _, stderr := runCLI(t, "", "version")
	if code != exitOK || !strings.Contains(stderr, "variable=ONCEQ_CONCURENCY did_you_mean=ONCEQ_CONCURRENCY") ||
		strings.Contains(stderr, "ONCEQ_QUEUE") {
		t.Errorf("exit %d, stderr %q; want a warning of ONCEQ_CONCURENCY alone", code, stderr)
	}
}
