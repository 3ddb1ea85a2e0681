package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
)

// Kinds of broker a report names.
const (
	brokerEmbedded = "embedded"
	brokerProcess  = "process"
	brokerExternal = "external"
)

// env is what a bench run works in: the brokers, an admin client, a
// temporary directory, and the names of the topics and groups it creates,
// all under one prefix so that runs against a shared broker never meet.
type env struct {
	o      *Options
	conn   broker.Conn
	kind   string
	emb    *embedded.Broker
	brk    *brokerProc
	adm    *broker.Admin
	tmp    string
	prefix string   // "bench-<hex>-": topics, groups and task IDs
	topics []string // created, deleted at the end on an external broker
}

// setup starts the bench's broker unless o.Conn names one, and connects.
func setup(ctx context.Context, o *Options) (e *env, err error) {
	var b [3]byte
	_, _ = rand.Read(b[:])
	e = &env{o: o, conn: o.Conn, prefix: "bench-" + hex.EncodeToString(b[:]) + "-"}
	if e.tmp, err = os.MkdirTemp("", "onceq-bench-"); err != nil {
		return nil, fmt.Errorf("bench: temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	dataDir := filepath.Join(e.tmp, "broker")
	switch {
	case len(o.Conn.Brokers) > 0:
		e.kind = brokerExternal
	case o.KillBroker:
		e.kind = brokerProcess
		if e.brk, err = startBrokerProc(ctx, o.Binary, dataDir, o.Partitions); err != nil {
			return nil, err
		}
		e.conn = broker.Conn{Brokers: []string{e.brk.addr}}
	default:
		e.kind = brokerEmbedded
		e.emb, err = embedded.Start(embedded.Config{DataDir: dataDir, Partitions: o.Partitions})
		if err != nil {
			return nil, err
		}
		e.conn = broker.Conn{Brokers: []string{e.emb.Addr()}}
	}
	if e.adm, err = broker.NewAdmin(e.conn); err != nil {
		return nil, err
	}
	// Fail early and clearly when the brokers cannot be reached.
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := e.adm.Kadm().Metadata(mctx); err != nil {
		return nil, fmt.Errorf("bench: reaching the brokers %s: %w", strings.Join(e.conn.Brokers, ","), err)
	}
	return e, nil
}

// name is the full name of one of the run's topics or groups.
func (e *env) name(s string) string { return e.prefix + s }

// createTopics creates the run's topics with o.Partitions partitions.
func (e *env) createTopics(ctx context.Context, names ...string) error {
	for _, n := range names {
		if err := e.adm.CreateTopic(ctx, n, int32(e.o.Partitions), nil); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		e.topics = append(e.topics, n)
	}
	return nil
}

// dir returns a fresh directory under the run's temporary directory.
func (e *env) dir(name string) string { return filepath.Join(e.tmp, name) }

// close deletes what the run created on an external broker, stops the
// bench's own broker and removes the temporary directory.
func (e *env) close() {
	if e.adm != nil {
		if e.kind == brokerExternal {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			names, _ := e.adm.ListTopics(ctx, true)
			for _, n := range names {
				group, _, changelog := broker.ParseChangelogTopic(n)
				if strings.HasPrefix(n, e.prefix) || changelog && strings.HasPrefix(group, e.prefix) {
					_ = e.adm.DeleteTopic(ctx, n)
				}
			}
			cancel()
		}
		e.adm.Close()
	}
	if e.emb != nil {
		e.emb.Close()
	}
	if e.brk != nil {
		e.brk.stop()
	}
	if e.tmp != "" {
		_ = os.RemoveAll(e.tmp)
	}
}

// freeAddr returns a loopback address whose port is free now, for a broker
// process that must restart on the same address.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening waits until something accepts connections on addr.
func waitListening(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: nothing listens on %s after %v: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
