package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// proc is an onceq subprocess whose output the bench keeps the tail of,
// for the error message when it fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
	err  error
}

// startProc starts binary with args; env, if not nil, is its environment.
func startProc(binary, name string, env []string, args ...string) (*proc, error) {
	p := &proc{name: name, cmd: exec.Command(binary, args...), out: &tail{max: 4096}, done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting %s (%s): %w", name, binary, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process and waits for it.
func (p *proc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// term asks the process to stop (SIGTERM) and waits up to timeout, then
// kills it. It returns an error unless it exited 0 in time.
func (p *proc) term(timeout time.Duration) error {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("bench: %s did not stop within %v of SIGTERM; killed it. Its last output:\n%s", p.name, timeout, p.out)
	}
	if p.err != nil {
		return fmt.Errorf("bench: %s: %v. Its last output:\n%s", p.name, p.err, p.out)
	}
	return nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// brokerProc is an "onceq broker" subprocess on a fixed address and data
// dir, which chaos kills and restarts.
type brokerProc struct {
	binary, addr, dataDir string
	partitions            int
	p                     *proc
}

func startBrokerProc(ctx context.Context, binary, dataDir string, partitions int) (*brokerProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	b := &brokerProc{binary: binary, addr: addr, dataDir: dataDir, partitions: partitions}
	return b, b.start(ctx)
}

func (b *brokerProc) start(ctx context.Context) error {
	p, err := startProc(b.binary, "broker", nil, "broker", "--listen", b.addr, "--data-dir", b.dataDir,
		"--partitions", strconv.Itoa(b.partitions), "--log-level", "warn")
	if err != nil {
		return err
	}
	b.p = p
	// Wait even when ctx is done: a broker left half started would hold
	// up the teardown.
	if err := waitListening(context.WithoutCancel(ctx), b.addr, 60*time.Second); err != nil {
		p.kill()
		return fmt.Errorf("%w. The broker's output:\n%s", err, p.out)
	}
	return nil
}

// restart kills the broker and starts it again on the same address and
// data dir.
func (b *brokerProc) restart(ctx context.Context) error {
	b.p.kill()
	return b.start(ctx)
}

func (b *brokerProc) stop() {
	if b.p != nil {
		_ = b.p.term(30 * time.Second)
	}
}
