package kafkatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startedLine is what a node logs once it serves.
const startedLine = "Kafka Server started"

// StartTimeout bounds the wait for a node to serve, from its JVM's start.
const StartTimeout = 3 * time.Minute

// Cluster is a running Kafka cluster of Start.
type Cluster struct {
	cfg     Config
	jars    string
	java    string
	log4j   string
	nodes   []*node
	closeMu sync.Mutex
	closed  bool
}

// node is one broker+controller: its files and, while it runs, its JVM.
type node struct {
	id             int
	dir            string // node-<id>
	props          string // server.properties
	port           int    // client listener
	controllerPort int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start fetches the jars of cfg.Version (Jars), formats cfg.Nodes nodes on
// free loopback ports and starts them, and returns once each serves and
// sees every node in its metadata. On an error, what started is stopped
// and the error holds the tail of the failing node's logs.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	java, err := javaPath()
	if err != nil {
		return nil, err
	}
	jars, err := Jars(ctx, cfg.Version, os.Stderr)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, jars: jars, java: java, log4j: filepath.Join(cfg.Dir, "log4j2.properties")}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.WriteFile(c.log4j, []byte(log4j2Props), 0o644); err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	ports, err := FreePorts(2 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	var voters []string
	for i := range cfg.Nodes {
		n := &node{id: i + 1, dir: filepath.Join(cfg.Dir, fmt.Sprintf("node-%d", i+1)), port: ports[2*i], controllerPort: ports[2*i+1]}
		n.props = filepath.Join(n.dir, "server.properties")
		c.nodes = append(c.nodes, n)
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", n.id, n.controllerPort))
	}
	clusterID := randomUUID()
	for _, n := range c.nodes {
		if err := os.MkdirAll(filepath.Join(n.dir, "logs"), 0o755); err != nil {
			return nil, fmt.Errorf("kafkatest: %w", err)
		}
		props := nodeProps(&c.cfg, n.id, strings.Join(voters, ","), filepath.Join(n.dir, "data"), n.port, n.controllerPort)
		if err := os.WriteFile(n.props, props, 0o644); err != nil {
			return nil, fmt.Errorf("kafkatest: %w", err)
		}
	}
	// Each node is formatted, then started; the nodes go together, and
	// none serves before a quorum of them runs.
	err = eachNode(c.nodes, func(n *node) error {
		args := []string{"format", "-t", clusterID, "-c", n.props}
		for _, k := range slices.Sorted(maps.Keys(cfg.Features)) {
			args = append(args, "--feature", k+"="+strconv.Itoa(cfg.Features[k]))
		}
		if _, err := c.tool(ctx, args...); err != nil {
			return fmt.Errorf("kafkatest: formatting node %d: %w", n.id, err)
		}
		return c.start(ctx, n)
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// eachNode runs fn on every node at once and joins their errors.
func eachNode(nodes []*node, fn func(*node) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// randomUUID is a cluster ID as Kafka's storage tool random-uuid prints
// one: 16 random bytes in unpadded URL-safe base64, not starting with '-'
// (which a command line would take for a flag).
func randomUUID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if s := base64.RawURLEncoding.EncodeToString(b[:]); s[0] != '-' {
			return s
		}
	}
}

// Seeds are the nodes' client addresses, host:port.
func (c *Cluster) Seeds() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
	}
	return out
}

// Nodes is the number of nodes; Kill, Stop and Restart take 1 to Nodes.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Version is the Kafka version the cluster runs.
func (c *Cluster) Version() string { return c.cfg.Version }

// Dir is the directory of the cluster's nodes (Config.Dir).
func (c *Cluster) Dir() string { return c.cfg.Dir }

// PID is node id's process ID, 0 while it is down.
func (c *Cluster) PID(id int) int {
	n := c.node(id)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.exited() {
		return 0
	}
	return n.cmd.Process.Pid
}

// Kill SIGKILLs node id and waits for its process to end.
func (c *Cluster) Kill(id int) error { return c.node(id).signal(syscall.SIGKILL, 0) }

// Stop stops node id with SIGTERM (a controlled shutdown), SIGKILLs it
// if it is still running after a minute, and waits for it.
func (c *Cluster) Stop(id int) error { return c.node(id).signal(syscall.SIGTERM, time.Minute) }

// Restart starts node id again, on its ports and data, after Kill or
// Stop, and returns once it serves and sees every running node.
func (c *Cluster) Restart(ctx context.Context, id int) error {
	n := c.node(id)
	n.mu.Lock()
	running := n.cmd != nil && !n.exited()
	n.mu.Unlock()
	if running {
		return fmt.Errorf("kafkatest: node %d is running: Kill or Stop it first", id)
	}
	return c.start(ctx, n)
}

// Close stops every node (Stop) at once. It is safe to call twice.
func (c *Cluster) Close() {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	_ = eachNode(c.nodes, func(n *node) error { return n.signal(syscall.SIGTERM, time.Minute) })
}

// LogTail is the last lines of node id's server.log and of what its JVM
// printed.
func (c *Cluster) LogTail(id int, lines int) string {
	n := c.node(id)
	var b strings.Builder
	for _, f := range []string{"server.log", "stdout.log"} {
		data, err := os.ReadFile(filepath.Join(n.dir, "logs", f))
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- node %d %s (last %d lines)\n%s\n", n.id, f, lines, tail(string(data), lines))
	}
	return b.String()
}

func (c *Cluster) node(id int) *node {
	if id < 1 || id > len(c.nodes) {
		panic(fmt.Sprintf("kafkatest: node %d: the cluster has nodes 1 to %d", id, len(c.nodes)))
	}
	return c.nodes[id-1]
}

// tool runs Kafka's storage tool with args and returns its output.
func (c *Cluster) tool(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.java, append([]string{"-Xshare:auto", "-Dlog4j2.configurationFile=" + c.log4j,
		"-Dkafka.logs.dir=" + c.cfg.Dir, "-cp", filepath.Join(c.jars, "*"), "kafka.tools.StorageTool"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kafkatest: storage tool %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 20))
	}
	return string(out), nil
}

// start runs node n's JVM and waits until it serves (ready).
func (c *Cluster) start(ctx context.Context, n *node) error {
	logs := filepath.Join(n.dir, "logs")
	serverLog := filepath.Join(logs, "server.log")
	var from int64
	if st, err := os.Stat(serverLog); err == nil {
		from = st.Size() // a restart appends: look past the last run
	}
	out, err := os.OpenFile(filepath.Join(logs, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	defer out.Close()
	// The JVM's temporary files (the native compression libraries it
	// unpacks) go in the node's directory, and it keeps no performance
	// data file in /tmp: a node killed leaves nothing outside its
	// directory.
	tmp := filepath.Join(n.dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	cmd := exec.Command(c.java, "-Xms256m", "-Xmx"+c.cfg.Heap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
		"-Xshare:auto", "-Djava.awt.headless=true", "-Djava.io.tmpdir="+tmp, "-XX:-UsePerfData",
		"-Dkafka.logs.dir="+logs, "-Dlog4j2.configurationFile="+c.log4j,
		"-cp", filepath.Join(c.jars, "*"), "kafka.Kafka", n.props)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	n.mu.Lock()
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		return fmt.Errorf("kafkatest: starting node %d: %w", n.id, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	done := n.done
	n.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	if err := c.waitReady(ctx, n, serverLog, from, done); err != nil {
		_ = n.signal(syscall.SIGKILL, 0)
		return fmt.Errorf("kafkatest: node %d (Kafka %s, port %d): %w\n%s", n.id, c.cfg.Version, n.port, err, c.LogTail(n.id, 40))
	}
	return nil
}

// waitReady waits until node n has logged startedLine past offset from of
// serverLog, accepts connections and answers a metadata request naming
// every running node of the cluster.
func (c *Cluster) waitReady(ctx context.Context, n *node, serverLog string, from int64, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	stage := "its log saying " + strconv.Quote(startedLine)
	for {
		select {
		case <-done:
			return errors.New("exited while starting")
		case <-ctx.Done():
			return fmt.Errorf("not serving after %v: waiting for %s", StartTimeout, stage)
		case <-tick.C:
		}
		if cl == nil {
			if !logged(serverLog, from, startedLine) {
				continue
			}
			stage = "a connection to " + addr
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				continue
			}
			conn.Close()
			var err2 error
			if cl, err2 = kgo.NewClient(kgo.SeedBrokers(addr)); err2 != nil {
				return err2
			}
		}
		want := c.running()
		stage = fmt.Sprintf("a metadata answer naming nodes %v", want)
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(rctx, cl.SeedBrokers()[0])
		rcancel()
		if err != nil {
			continue
		}
		seen := map[int]bool{}
		for _, b := range resp.Brokers {
			seen[int(b.NodeID)] = true
		}
		all := true
		for _, id := range want {
			all = all && seen[id]
		}
		if all {
			return nil
		}
	}
}

// running is the IDs of the nodes whose JVM runs.
func (c *Cluster) running() []int {
	var ids []int
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.cmd != nil && !n.exited() {
			ids = append(ids, n.id)
		}
		n.mu.Unlock()
	}
	return ids
}

// logged reports whether file holds line past offset from.
func logged(file string, from int64, line string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(from, 0); err != nil {
		return false
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return false
	}
	return bytes.Contains(buf.Bytes(), []byte(line))
}

// exited reports whether the node's JVM has ended; n.mu is held.
func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the node's JVM and waits for it to end, SIGKILLing
// it after grace (0: wait as long as it takes). A node not running is
// left alone.
func (n *node) signal(sig syscall.Signal, grace time.Duration) error {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kafkatest: node %d: %w", n.id, err)
	}
	if grace > 0 {
		select {
		case <-done:
			return nil
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-done
	return nil
}

// FreePorts are n distinct loopback ports free at the time of the call,
// for processes that must restart on the same port. They are below the
// kernel's range of ephemeral ports where it can be: a port from that
// range (as ":0" gives) may be taken by any outgoing connection, a
// client's of another node say, before the process binds it, or while it
// restarts.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	low := ephemeralLow()
	for tries := 0; len(ports) < n && low > 10000 && tries < 100*n; tries++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+mrand.IntN(low-10000))))
		if err != nil {
			continue // taken
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kafkatest: finding a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralLow is the lowest port the kernel hands out to outgoing
// connections and to listeners on port 0 (Linux), 0 when unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}
