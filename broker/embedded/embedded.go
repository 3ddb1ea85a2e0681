package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/onceq/onceq/broker"
)

// configErr is a refused setting: it wraps broker.ErrConfig.
func configErr(format string, args ...any) error {
	return fmt.Errorf("broker: %s: %w", fmt.Sprintf(format, args...), broker.ErrConfig)
}

// ErrDataDirInUse is returned when another process holds the data dir.
var ErrDataDirInUse = errors.New("data dir in use")

// MaxNodes is the most nodes an embedded cluster runs (Config.Nodes).
const MaxNodes = 9

// MinMoveLeadersEvery is the shortest Config.MoveLeadersEvery: moving
// leaders more often leaves clients no time to act between two moves.
const MinMoveLeadersEvery = 100 * time.Millisecond

// Config configures the embedded broker. The zero value listens on
// a random loopback port and keeps everything in memory.
type Config struct {
	// Listen is host:port of the first node. Default "127.0.0.1:0", a
	// random free port. The host is also what the broker advertises to
	// clients.
	Listen string
	// Nodes is the number of brokers of the cluster, 1 to MaxNodes.
	// Default 1. Node i listens on Listen's port plus i (9092, 9093,
	// 9094, ... as a laptop Kafka cluster would), or, when that port is 0,
	// every node on a free port of its own. The nodes share one log in
	// this process (a partition has one replica, on its leader): they
	// exist so that clients meet leaders and group and transaction
	// coordinators on several nodes, and follow them when they move
	// (MoveLeaders, MoveLeadersEvery). A data dir records each
	// partition's leader and restores it when the cluster restarts with
	// the same number of nodes.
	Nodes int
	// MoveLeadersEvery, when above zero, moves leaders and coordinators
	// (MoveLeaders) at this interval until Close, for tests of clients
	// under elections. At least MinMoveLeadersEvery. Default 0: never.
	MoveLeadersEvery time.Duration
	// DataDir persists the log, groups and transactions. Empty: in memory
	// only. Only one process may use a data dir at a time.
	DataDir string
	// Sync fsyncs every produced batch. Off by default, like Kafka: the OS
	// page cache holds writes until a segment rolls or the broker stops.
	Sync bool
	// Partitions is the partition count of topics created without one and
	// of auto-created topics: 1 to broker.MaxPartitions. Default 8.
	Partitions int
	// NoAutoCreate turns off the creation of topics on first use. By
	// default a topic that a client asks for in a metadata request that
	// allows auto-creation (as producers such as kcat and librdkafka do)
	// is created with Partitions partitions, as Kafka's
	// auto.create.topics.enable does. franz-go clients, and so onceq
	// itself, ask for it only with kgo.AllowAutoTopicCreation.
	NoAutoCreate bool
	// Logger receives the broker's warnings and errors. Default: discarded.
	Logger *slog.Logger
	// Configs are extra broker-level configs (message.max.bytes,
	// transaction.max.timeout.ms, ...).
	Configs map[string]string
}

// Broker is a running embedded broker of one or more nodes.
type Broker struct {
	cluster   *kfake.Cluster
	addrs     []string
	closeOnce sync.Once
	stop      chan struct{} // closed by Close: ends the leader mover
	moved     sync.WaitGroup
	lock      *os.File
	clusterID string
	dataDir   string
}

// Start starts the embedded broker. Close stops it.
func Start(cfg Config) (*Broker, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil || port < 0 || port > 65535 {
		return nil, configErr("listen address %q: want host:port, for example 127.0.0.1:9092", cfg.Listen)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 8
	}
	if cfg.Partitions < 0 || cfg.Partitions > broker.MaxPartitions {
		return nil, configErr("default partitions %d: want 1 to %d", cfg.Partitions, broker.MaxPartitions)
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 1
	}
	if cfg.Nodes < 0 || cfg.Nodes > MaxNodes {
		return nil, configErr("nodes %d: want 1 to %d", cfg.Nodes, MaxNodes)
	}
	if port > 0 && port+cfg.Nodes-1 > 65535 {
		return nil, configErr("listen address %q with %d nodes: ports %d to %d do not all exist: choose a lower port", cfg.Listen, cfg.Nodes, port, port+cfg.Nodes-1)
	}
	if cfg.MoveLeadersEvery < 0 || (cfg.MoveLeadersEvery > 0 && cfg.MoveLeadersEvery < MinMoveLeadersEvery) {
		return nil, configErr("move leaders every %v: want 0 (never) or at least %v", cfg.MoveLeadersEvery, MinMoveLeadersEvery)
	}
	e := &Broker{clusterID: "onceq-embedded", stop: make(chan struct{})}
	ports := make([]int, cfg.Nodes)
	for i := range ports {
		if port > 0 {
			ports[i] = port + i
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(cfg.Nodes),
		kfake.Ports(ports...),
		// kfake asks for 127.0.0.1:<port>: listen on the configured host
		// instead, which the nodes then advertise.
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
		kfake.DefaultNumPartitions(cfg.Partitions),
	}
	if !cfg.NoAutoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("broker: creating data dir: %w", err)
		}
		var unclean bool
		if e.lock, unclean, err = lockDir(cfg.DataDir); err != nil {
			return nil, err
		}
		if unclean {
			rec, err := recoverOpenTxns(cfg.DataDir)
			if err != nil {
				e.unlock()
				return nil, fmt.Errorf("broker: data dir %s was not closed cleanly and recovering it failed: %w", cfg.DataDir, err)
			}
			if cfg.Logger != nil && rec != (recovery{}) {
				cfg.Logger.Warn("broker data dir was not closed cleanly: completed its open transactions and restored its producers' sequences",
					"data_dir", cfg.DataDir, "commit_markers", rec.Committed, "abort_markers", rec.Aborted, "producers_fenced", rec.Producers,
					"sequences_restored", rec.Sequences, "offsets_restored", rec.Offsets)
			}
		}
		// After a clean stop, or the recovery, no transaction is being
		// committed: a note left is stale.
		if err := clearTxnNote(cfg.DataDir); err != nil {
			e.unlock()
			return nil, fmt.Errorf("broker: %w", err)
		}
		if err := dropUnstorableTopics(cfg.DataDir, cfg.Logger); err != nil {
			e.unlock()
			return nil, err
		}
		if e.clusterID, err = loadClusterID(cfg.DataDir); err != nil {
			e.unlock()
			return nil, err
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
		if cfg.Sync {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	opts = append(opts, kfake.ClusterID(e.clusterID))
	if cfg.Logger != nil {
		opts = append(opts, kfake.WithLogger(slogAdapter{cfg.Logger}))
	}
	if len(cfg.Configs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(cfg.Configs))
	}
	e.cluster, err = kfake.NewCluster(opts...)
	if err != nil {
		e.unlock()
		if strings.Contains(err.Error(), "address already in use") {
			where := cfg.Listen
			if cfg.Nodes > 1 && port > 0 {
				where = fmt.Sprintf("%s (ports %d to %d, one a node)", cfg.Listen, port, port+cfg.Nodes-1)
			}
			return nil, fmt.Errorf("broker: listening on %s: the address is in use: stop what listens there or choose another --listen: %w", where, err)
		}
		return nil, fmt.Errorf("broker: starting embedded broker: %w", err)
	}
	var budget *fdBudget
	if cfg.DataDir != "" {
		budget = &fdBudget{defaultPartitions: int32(cfg.Partitions)}
	}
	installGuards(e.cluster, budget)
	answerLeaderEpochs(e.cluster)
	boundRebalances(e.cluster)
	if cfg.DataDir != "" {
		installTxnNotes(e.cluster, cfg.DataDir, cfg.Sync, cfg.Logger)
		e.dataDir = cfg.DataDir
	}
	e.addrs = e.cluster.ListenAddrs()
	if cfg.MoveLeadersEvery > 0 {
		e.moved.Add(1)
		go e.moveLeadersEvery(cfg.MoveLeadersEvery)
	}
	return e, nil
}

// Addr is the host:port of the first node, which clients may use as their
// only seed: metadata names the others.
func (e *Broker) Addr() string { return e.addrs[0] }

// Addrs are the host:ports of every node, the first one's first.
func (e *Broker) Addrs() []string { return append([]string(nil), e.addrs...) }

// MoveLeaders simulates elections across the cluster: every partition
// gets a leader drawn at random among the nodes (possibly the one it had)
// with its leader epoch bumped, and every group and transactional ID is
// rehashed to a coordinator, so clients see NOT_LEADER_OR_FOLLOWER,
// FENCED_LEADER_EPOCH and NOT_COORDINATOR and must reload metadata, as
// they do when a Kafka broker fails over. With one node only the epochs
// and the coordinator hash change. The log itself does not move: no
// record is lost or duplicated by a move.
func (e *Broker) MoveLeaders() {
	e.cluster.ShufflePartitionLeaders()
	e.cluster.RehashCoordinators()
}

// moveLeadersEvery calls MoveLeaders every d until Close.
func (e *Broker) moveLeadersEvery(d time.Duration) {
	defer e.moved.Done()
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
			e.MoveLeaders()
		}
	}
}

// ClusterID is the broker's cluster ID, stable across restarts on one data
// dir.
func (e *Broker) ClusterID() string { return e.clusterID }

// Cluster exposes the underlying kfake cluster, for fault injection in
// tests (ControlKey).
func (e *Broker) Cluster() *kfake.Cluster { return e.cluster }

// Close stops the broker, flushes its data dir and releases it.
// It is safe to call more than once.
func (e *Broker) Close() {
	e.closeOnce.Do(func() {
		close(e.stop)
		e.moved.Wait() // MoveLeaders must not reach a closed cluster
		e.cluster.Close()
		if e.dataDir != "" {
			_ = clearTxnNote(e.dataDir) // every transaction's commit ended
		}
		if e.lock != nil {
			_ = e.lock.Truncate(0) // a clean stop: nothing to recover
			_ = e.lock.Sync()
		}
		e.unlock()
	})
}

// Run serves until ctx is done, then closes the broker.
func (e *Broker) Run(ctx context.Context) {
	<-ctx.Done()
	e.Close()
}

func (e *Broker) unlock() {
	if e.lock != nil {
		_ = syscall.Flock(int(e.lock.Fd()), syscall.LOCK_UN)
		_ = e.lock.Close()
		e.lock = nil
	}
}

// lockDir takes an exclusive advisory lock on dir/onceq.lock. The lock dies
// with the process, so a killed broker never leaves a stale lock. The file
// holds the holder's process ID until Close empties it: unclean reports a
// previous holder that stopped without closing.
func lockDir(dir string) (f *os.File, unclean bool, err error) {
	path := filepath.Join(dir, "onceq.lock")
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("broker: opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		who := "another process"
		if pid := strings.TrimSpace(string(holder)); pid != "" {
			who = "process " + pid
		}
		return nil, false, fmt.Errorf("broker: data dir %s is in use by %s: stop that broker or choose another --data-dir: %w", dir, who, ErrDataDirInUse)
	}
	prev, _ := io.ReadAll(f)
	unclean = len(strings.TrimSpace(string(prev))) > 0
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	_ = f.Sync()
	return f, unclean, nil
}

// loadClusterID reads the data dir's cluster ID, creating it on first use.
func loadClusterID(dir string) (string, error) {
	path := filepath.Join(dir, "cluster-id")
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" {
			return "", fmt.Errorf("broker: %s is empty: restore it or remove the data dir", path)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("broker: reading cluster ID: %w", err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	id := "onceq-" + hex.EncodeToString(r[:])
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("broker: writing cluster ID: %w", err)
	}
	return id, nil
}

type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Logf(level kfake.LogLevel, msg string, args ...any) {
	var l slog.Level
	switch level {
	case kfake.LogLevelError:
		l = slog.LevelError
	case kfake.LogLevelWarn:
		l = slog.LevelWarn
	default: // kfake logs every request at info: that is debug detail here

		l = slog.LevelDebug
	}
	if a.l.Enabled(context.Background(), l) {
		a.l.Log(context.Background(), l, fmt.Sprintf(msg, args...), "component", "broker")
	}
}
