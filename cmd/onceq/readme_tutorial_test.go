package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testutil"
)

// tutorialHeading is the README section whose sh blocks TestReadmeTutorial
// runs.
const tutorialHeading = "\n## Five-minute tutorial\n"

// ownTerminal marks a tutorial command that runs until Ctrl-C: the test
// starts it in the background and stops it at the end.
const ownTerminal = "# in its own terminal"

// tutorialReady is what a command that runs until Ctrl-C logs once the
// tutorial's next commands can use it, by subcommand.
var tutorialReady = map[string]string{
	"broker": `msg="broker listening"`,
	"worker": `msg="worker started"`,
	"serve":  `msg=serving`,
}

// tutorialCommand is one line of a tutorial sh block, with the output
// lines the README shows after its block when it is the block's last.
type tutorialCommand struct {
	line   string
	want   []string // lines of its stdout, in order; "..." stands for any lines
	ground bool     // runs until Ctrl-C: in the background
}

// readmeTutorial extracts the commands of the README's tutorial: every
// line of its ```sh blocks, and each plain ``` block as the output of
// the command before it.
func readmeTutorial(t *testing.T) (cmds []tutorialCommand, section string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), tutorialHeading)
	if !ok {
		t.Fatalf("README.md has no %q section", strings.TrimSpace(tutorialHeading))
	}
	section, _, _ = strings.Cut(section, "\n## ")
	lines := strings.Split(section, "\n")
	for i := 0; i < len(lines); i++ {
		fence := lines[i]
		if fence != "```sh" && fence != "```" {
			continue
		}
		var block []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			block = append(block, strings.TrimRight(lines[i], " "))
		}
		if fence == "```" {
			if len(cmds) == 0 {
				t.Fatal("README.md's tutorial shows output before any command")
			}
			cmds[len(cmds)-1].want = block
			continue
		}
		for _, l := range block {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			cmds = append(cmds, tutorialCommand{line: l, ground: strings.Contains(l, ownTerminal)})
		}
	}
	return cmds, section
}

// TestReadmeTutorial runs the README's five-minute tutorial as written,
// line by line with sh, in an empty directory with the onceq binary first
// in PATH: the broker, worker and server it starts in their own terminals
// run in the background until the test ends, each waited for until it logs
// that it is ready; every other command must exit 0 and print the lines
// the README shows after it. The last check is the console at the URL the
// README gives, logged in with the token the tutorial created.
//
// The tutorial's addresses are the defaults (127.0.0.1:9092 for the broker,
// 127.0.0.1:7700 for the server); the test moves them to free ports through
// the environment, as any flag can be (ONCEQ_BROKERS for every command,
// ONCEQ_LISTEN for the broker's and the server's), so that it runs beside
// other tests and other brokers.
func TestReadmeTutorial(t *testing.T) {
	clearEnv(t)
	cmds, section := readmeTutorial(t)
	subcommands := map[string]bool{}
	for _, c := range cmds {
		f := strings.Fields(c.line)
		if len(f) < 2 || f[0] != "onceq" {
			t.Fatalf("README.md's tutorial: %q: want onceq commands", c.line)
		}
		if _, long := tutorialReady[f[1]]; long != c.ground {
			t.Fatalf("README.md's tutorial: %q: broker, worker and serve lines, and only they, say %q", c.line, ownTerminal)
		}
		subcommands[strings.Join(f[:2], " ")] = true
		if f[1] == "produce" && strings.Contains(c.line, "--delay") {
			subcommands["a delayed task"] = true
		}
	}
	for _, want := range []string{"onceq broker", "onceq topics", "onceq worker", "onceq produce", "a delayed task",
		"onceq task", "onceq token", "onceq serve"} {
		if !subcommands[want] {
			t.Errorf("README.md's tutorial has no %s", want)
		}
	}
	console := regexp.MustCompile(`<(http://127\.0\.0\.1:7700/console/)>`).FindStringSubmatch(section)
	if console == nil {
		t.Error("README.md's tutorial names no console URL <http://127.0.0.1:7700/console/>")
	}
	if t.Failed() {
		return
	}

	bin := testutil.Binary(t)
	dir := t.TempDir()
	brokerAddr, serveAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	env := append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"ONCEQ_BROKERS="+brokerAddr)
	listen := map[string]string{"broker": brokerAddr, "serve": serveAddr}

	var token string
	for _, c := range cmds {
		sub := strings.Fields(c.line)[1]
		cmdEnv := env
		if addr, ok := listen[sub]; ok {
			cmdEnv = append(cmdEnv[:len(cmdEnv):len(cmdEnv)], "ONCEQ_LISTEN="+addr)
		}
		if c.ground {
			p := startShell(t, dir, cmdEnv, c.line)
			p.waitFor(t, c.line, tutorialReady[sub], time.Minute)
			continue
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", c.line)
		cmd.Dir, cmd.Env = dir, cmdEnv
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("README.md's tutorial: %s: %v\nstdout:\n%s\nstderr:\n%s", c.line, err, stdout.String(), stderr.String())
		}
		t.Logf("%s (%v):\n%s", c.line, time.Since(start).Round(time.Millisecond), stdout.String())
		if c.want != nil {
			checkShown(t, c.line, c.want, stdout.String())
		}
		if sub == "token" {
			token = strings.TrimSpace(stdout.String())
		}
	}

	if !strings.HasPrefix(token, "oq_") {
		t.Fatalf("README.md's tutorial: onceq token create printed %q, want a token oq_...", token)
	}
	url := strings.Replace(console[1], "127.0.0.1:7700", serveAddr, 1)
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the console at %s: %v", console[1], err)
	}
	defer resp.Body.Close()
	var page bytes.Buffer
	_, _ = page.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page.String(), `href="/console/q/hello"`) {
		t.Fatalf("the console at %s, logged in with the token: %d, want 200 listing queue hello:\n%s", console[1], resp.StatusCode, page.String())
	}
}

// checkShown checks that out holds the lines the README shows, in order,
// each a whole line (trailing spaces aside); "..." stands for any lines.
func checkShown(t *testing.T, line string, want []string, out string) {
	t.Helper()
	got := strings.Split(strings.TrimRight(out, "\n"), "\n")
	next := 0
	skip := false
	for _, w := range want {
		if w == "..." {
			skip = true
			continue
		}
		found := false
		for next < len(got) {
			g := strings.TrimRight(got[next], " ")
			next++
			if g == w {
				found = true
				break
			}
			if !skip {
				break
			}
		}
		if !found {
			t.Fatalf("README.md's tutorial: %s printed:\n%s\nwant the lines the README shows:\n%s", line, out, strings.Join(want, "\n"))
		}
		skip = false
	}
}

// shellProcess is a tutorial command that runs until it is killed.
type shellProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *shellProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *shellProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startShell runs line with sh in the background (exec: the command
// replaces the shell, so killing it kills the command), killed when the
// test ends.
func startShell(t *testing.T, dir string, env []string, line string) *shellProcess {
	t.Helper()
	p := &shellProcess{cmd: exec.Command("sh", "-c", "exec "+line), done: make(chan struct{})}
	p.cmd.Dir, p.cmd.Env = dir, env
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("README.md's tutorial: %s: %v", line, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// waitFor waits until the process logs a line matching re.
func (p *shellProcess) waitFor(t *testing.T, line, re string, timeout time.Duration) {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(timeout)
	for !rx.MatchString(p.output()) {
		select {
		case <-p.done:
			if rx.MatchString(p.output()) {
				return
			}
			t.Fatalf("README.md's tutorial: %s exited before it logged %q:\n%s", line, re, p.output())
		case <-deadline:
			t.Fatalf("README.md's tutorial: %s logged no %q within %v:\n%s", line, re, timeout, p.output())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
