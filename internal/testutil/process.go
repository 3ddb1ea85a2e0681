package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/kafkatest"
)

// Process is a running onceq subprocess whose output is captured.
type Process struct {
	Cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

// Start runs the onceq binary with args. The process is killed when the
// test ends if it is still running.
func Start(t testing.TB, args ...string) *Process {
	t.Helper()
	return StartBinary(t, Binary(t), args...)
}

// StartBinary is Start with another onceq binary: one built from another
// commit, which a benchmark compares with this one.
func StartBinary(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), done: make(chan struct{})}
	// The test's own settings (ONCEQ_TEST_KAFKA, ...) are no flags of
	// onceq's, which would warn of them.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ONCEQ_TEST_") {
			p.Cmd.Env = append(p.Cmd.Env, kv)
		}
	}
	pr, pw := io.Pipe()
	p.Cmd.Stdout = pw
	p.Cmd.Stderr = pw
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("starting onceq %s: %v", strings.Join(args, " "), err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.Write(sc.Bytes())
			p.out.WriteByte('\n')
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr) // past a line too long, so the process never blocks
	}()
	go func() {
		p.err = p.Cmd.Wait()
		pw.Close()
		// Output after Wait holds the last lines too: the exit is known
		// once they are read, not before.
		<-scanned
		close(p.done)
	}()
	t.Cleanup(func() { p.Kill() })
	return p
}

// Output is what the process printed so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// WaitOutput waits until the output matches re and returns the first
// submatch (or the whole match).
func (p *Process) WaitOutput(t testing.TB, re string, timeout time.Duration) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(p.Output()); m != nil {
			return m[len(m)-1]
		}
		select {
		case <-p.done:
			if m := rx.FindStringSubmatch(p.Output()); m != nil {
				return m[len(m)-1]
			}
			t.Fatalf("process exited (%v) before printing %q; output:\n%s", p.err, re, p.Output())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no %q within %v; output:\n%s", re, timeout, p.Output())
	return ""
}

// Wait waits for the process to exit and returns its exit code.
func (p *Process) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("process still running after %v", timeout)
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) { _ = p.Cmd.Process.Signal(sig) }

// Kill SIGKILLs the process and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// FreeAddr returns a loopback address with a port free at the time of the
// call, for processes that must restart on the same address: one below
// the kernel's ephemeral ports, which any outgoing connection of the tests
// may take (kafkatest.FreePorts).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ports, err := kafkatest.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}

// StartBrokerProcess runs "onceq broker" on listen (empty: a free port)
// and dataDir, waits until it listens, and returns it with its address.
// The test is skipped on Apache Kafka (NeedsEmbedded): it is about a
// broker process it stops and starts, or leader moves on demand.
func StartBrokerProcess(t testing.TB, listen, dataDir string, extra ...string) (*Process, string) {
	t.Helper()
	NeedsEmbedded(t, "an onceq broker process")
	if listen == "" {
		listen = FreeAddr(t)
	}
	args := append([]string{"broker", "--listen", listen, "--data-dir", dataDir}, extra...)
	p := Start(t, args...)
	addr := p.WaitOutput(t, `broker listening"? addr=(\S+)`, 30*time.Second)
	return p, addr
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
