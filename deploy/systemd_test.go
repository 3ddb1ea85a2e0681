package deploy_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// unitInstance is the instance the template units are read as:
// onceq-worker@emails.service, whose environment file env/worker-emails.env
// is the example.
const unitInstance = "emails"

// unitBinary is where the units expect the binary.
const unitBinary = "/usr/local/bin/onceq"

// unit is a systemd unit file: each key's values in order, by
// "Section.Key".
type unit struct {
	path string
	keys map[string][]string
}

func (u unit) last(key string) string {
	if v := u.keys[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

func loadUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{path: path, keys: map[string][]string{}}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || strings.HasSuffix(line, "\\") {
				t.Fatalf("%s: line %q: want Key=Value on one line", path, line)
			}
			k = section + "." + strings.TrimSpace(k)
			u.keys[k] = append(u.keys[k], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// loadEnv reads an environment file: KEY=VALUE lines, comments and blank
// lines between them.
func loadEnv(t *testing.T, path string, into map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: each EnvironmentFile of a unit has its example in systemd/env/", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q: want KEY=VALUE", path, line)
		}
		into[k] = v
	}
}

var (
	bracedRe = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	bareRe   = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
)

// expandExec splits an ExecStart line into words as systemd does for the
// forms the units use: ${VAR} inside a word is replaced by its value as
// it is, a word that is $VAR alone by its value split at white space
// (none for an empty one).
func expandExec(line string, env map[string]string) ([]string, error) {
	var words []string
	for _, w := range strings.Fields(line) {
		if m := bareRe.FindStringSubmatch(w); m != nil {
			v, ok := env[m[1]]
			if !ok {
				return nil, fmt.Errorf("$%s is set by none of its environment files' examples", m[1])
			}
			words = append(words, strings.Fields(v)...)
			continue
		}
		var missing []string
		w = bracedRe.ReplaceAllStringFunc(w, func(s string) string {
			name := bracedRe.FindStringSubmatch(s)[1]
			v, ok := env[name]
			if !ok {
				missing = append(missing, name)
			}
			return v
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("${%s} is set by none of its environment files' examples", strings.Join(missing, "}, ${"))
		}
		if strings.ContainsAny(w, `$"'\`) {
			return nil, fmt.Errorf("word %q: a form of quoting or expansion these tests do not read", w)
		}
		words = append(words, w)
	}
	return words, nil
}

// TestSystemdUnits checks each unit's ExecStart against the binary, with
// its environment files' examples: every flag is one its command accepts
// (onceq CMD ... --help), every variable it uses is set, its directories
// are the unit's own state or cache directories. It checks that the unit
// restarts on failure, stops with SIGTERM and waits longer than the
// shutdown timeout, and does not run as root. systemd-analyze verify, when
// the machine has it, checks the rest of the syntax.
func TestSystemdUnits(t *testing.T) {
	paths, err := filepath.Glob("systemd/*.service")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no units in systemd/ (%v)", err)
	}
	for _, path := range paths {
		u := loadUnit(t, path)
		// What systemd sets for the unit's directories, as a
		// temporary directory each.
		env := map[string]string{"STATE_DIRECTORY": t.TempDir(), "CACHE_DIRECTORY": t.TempDir()}
		for _, f := range u.keys["Service.EnvironmentFile"] {
			name := strings.ReplaceAll(filepath.Base(strings.TrimPrefix(f, "-")), "%i", unitInstance)
			loadEnv(t, filepath.Join("systemd", "env", name), env)
		}
		execs := u.keys["Service.ExecStart"]
		if len(execs) != 1 {
			t.Errorf("%s: %d ExecStart lines, want one", path, len(execs))
			continue
		}
		words, err := expandExec(execs[0], env)
		if err != nil {
			t.Errorf("%s: ExecStart: %v", path, err)
			continue
		}
		if words[0] != unitBinary {
			t.Errorf("%s: ExecStart runs %s, want %s", path, words[0], unitBinary)
		}
		cmd, err := parseCommand(words[1:])
		if err != nil {
			t.Errorf("%s: ExecStart: %v", path, err)
			continue
		}
		help := checkFlags(t, path, cmd)

		for _, name := range dirFlags {
			if dir, ok := cmd.get(name); ok && dir != env["STATE_DIRECTORY"] && dir != env["CACHE_DIRECTORY"] {
				t.Errorf("%s: --%s %s is not the unit's StateDirectory or CacheDirectory", path, name, dir)
			}
		}
		if strings.Contains(execs[0], "STATE_DIRECTORY") && u.last("Service.StateDirectory") == "" {
			t.Errorf("%s: ExecStart uses $STATE_DIRECTORY, which no StateDirectory= sets", path)
		}
		if strings.Contains(execs[0], "CACHE_DIRECTORY") && u.last("Service.CacheDirectory") == "" {
			t.Errorf("%s: ExecStart uses $CACHE_DIRECTORY, which no CacheDirectory= sets", path)
		}
		for key, want := range map[string]string{"Service.Restart": "on-failure", "Service.KillSignal": "SIGTERM", "Service.NoNewPrivileges": "yes"} {
			if got := u.last(key); got != want {
				t.Errorf("%s: %s=%q, want %s", path, key, got, want)
			}
		}
		if user := u.last("Service.User"); u.last("Service.DynamicUser") != "yes" && (user == "" || user == "root" || user == "0") {
			t.Errorf("%s: runs as root: want DynamicUser=yes or a User of its own", path)
		}
		timeout, err := cmd.shutdownTimeout(help)
		if err != nil {
			t.Errorf("%s: --shutdown-timeout: %v", path, err)
		}
		if stop, err := time.ParseDuration(u.last("Service.TimeoutStopSec")); err != nil || stop <= timeout {
			t.Errorf("%s: TimeoutStopSec=%q, want a duration above the command's shutdown timeout (%v)", path, u.last("Service.TimeoutStopSec"), timeout)
		}
	}
	verifyUnits(t, paths)
}

// verifyUnits runs systemd-analyze verify on each unit, rewritten to run
// the binary the tests built (verify refuses a unit whose binary does not
// exist). It exits 0 for keys it ignores, so any output fails too.
func verifyUnits(t *testing.T, paths []string) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("systemd-analyze verify: not run, the machine has no systemd-analyze (%v)", err)
	}
	bin := testutil.Binary(t)
	dir := t.TempDir()
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		copyPath := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(copyPath, []byte(strings.ReplaceAll(string(b), unitBinary, bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", path, err, out)
		}
	}
}
