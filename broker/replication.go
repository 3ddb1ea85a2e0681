package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Every topic onceq creates, its own (the catalogue's) and a user's queue
// (onceq topics create, --create-queues), is created by Admin.CreateTopic
// or Admin.EnsureTopics, and every Admin is made from a Conn: so the
// replication of the topics onceq creates is a setting of the Conn, which
// reaches every package the way the brokers' addresses do.
//
// Kafka's default.replication.factor is 1. On a cluster of several
// brokers left at that default, onceq's changelogs and task records would
// each live on one broker's disk, and losing that disk would lose which
// tasks ran: the exactly-once guarantee would quietly become "at most
// once per disk". Before it creates a topic on a cluster of more than one
// broker, an Admin therefore works out the replication factor the topic
// would get and refuses 1 unless Replication.AllowSingleReplica says so.
// A cluster of one broker (the embedded broker, a laptop) can do no
// better, and is left alone.

// MaxReplicationFactor is the largest replication factor Kafka takes.
const MaxReplicationFactor = 32767

// DefaultReplicationFactor asks for the brokers' default.replication.factor.
const DefaultReplicationFactor = -1

// ErrSingleReplica is wrapped by the refusal to create a topic of one
// replica on a cluster of several brokers (see Replication).
var ErrSingleReplica = errors.New("single replica on a cluster of several brokers")

// Replication is how the topics an Admin creates are replicated. It
// applies only to topics created: existing topics keep theirs. The zero
// value is the brokers' defaults, with the single-replica check on.
type Replication struct {
	// Factor is the replication factor of every topic created: 1 to
	// MaxReplicationFactor, or DefaultReplicationFactor (-1; 0 means the
	// same) for the brokers' default.replication.factor. Default -1.
	Factor int16
	// MinInsyncReplicas, when above 0, is the min.insync.replicas config
	// of every topic created, unless the topic's own configs set it: how
	// many replicas must have a write before it counts (acks=all, which
	// onceq's producers use). 1 to Factor when Factor is given. Default 0:
	// the brokers' min.insync.replicas.
	MinInsyncReplicas int
	// AllowSingleReplica lets a topic of one replica be created on a
	// cluster of more than one broker. Off by default: such a topic is
	// refused with ErrSingleReplica, whether Factor is 1 or Factor is the
	// default and the brokers' default.replication.factor is 1, since the
	// loss of one broker would lose its records. A cluster of one broker
	// is never refused.
	AllowSingleReplica bool
}

// factor is the replication factor sent in CreateTopics: -1 for the
// brokers' default.
func (r Replication) factor() int16 {
	if r.Factor == 0 {
		return DefaultReplicationFactor
	}
	return r.Factor
}

// validate checks the settings without connecting. The messages name the
// CLI's flags, which map onto these fields one to one.
func (r Replication) validate() error {
	if r.Factor < DefaultReplicationFactor {
		return topicErr("--replication-factor %d: want %d (the brokers' default.replication.factor) or 1 to %d, for example 3",
			r.Factor, DefaultReplicationFactor, MaxReplicationFactor)
	}
	if r.MinInsyncReplicas < 0 {
		return topicErr("--min-insync-replicas %d: want 0 (the brokers' min.insync.replicas) or 1 to the replication factor, for example 2",
			r.MinInsyncReplicas)
	}
	if f := r.factor(); f > 0 && r.MinInsyncReplicas > int(f) {
		return topicErr("--min-insync-replicas %d is more than --replication-factor %d, so every write would fail: want 1 to %d, for example %d",
			r.MinInsyncReplicas, f, f, max(1, int(f)-1))
	}
	return nil
}

// createConfigs returns configs with min.insync.replicas added when the
// Replication sets it and configs do not.
func (r Replication) createConfigs(configs map[string]string) map[string]string {
	if r.MinInsyncReplicas <= 0 {
		return configs
	}
	if _, ok := configs["min.insync.replicas"]; ok {
		return configs
	}
	out := make(map[string]string, len(configs)+1)
	for k, v := range configs {
		out[k] = v
	}
	out["min.insync.replicas"] = strconv.Itoa(r.MinInsyncReplicas)
	return out
}

// clusterReplication is what an Admin learned of the cluster's
// replication: how many brokers it has, and their
// default.replication.factor (0 until it is needed).
type clusterReplication struct {
	mu            sync.Mutex
	brokers       int
	nodes         []int32 // the brokers' IDs
	defaultFactor int16
}

// checkReplication refuses to create topics (the first named, and more
// others) with configs when the replication they would get is one replica
// on a cluster of several brokers (ErrSingleReplica), or fewer replicas
// than their min.insync.replicas. It asks the brokers only what it needs,
// once per Admin: nothing for a factor of 2 or more, their number for a
// factor of 1 or the default, their default.replication.factor for the
// default on a cluster of several.
func (a *Admin) checkReplication(ctx context.Context, first string, more int, configs map[string]string) error {
	r := a.conn.Replication
	factor := r.factor()
	minISR, _ := strconv.Atoi(configs["min.insync.replicas"]) // checked by TopicConfigProblem
	what := fmt.Sprintf("topic %q", first)
	if more > 0 {
		what = fmt.Sprintf("topic %q and %d more", first, more)
	}
	if factor > 1 || (factor == 1 && r.AllowSingleReplica && minISR <= 1) {
		if minISR > int(factor) {
			return topicErr("creating %s: min.insync.replicas=%d is more than its replication factor %d, so every write would fail: "+
				"lower min.insync.replicas or raise --replication-factor", what, minISR, factor)
		}
		return nil
	}
	brokers, err := a.brokerCount(ctx)
	if err != nil {
		return err
	}
	effective, source := factor, "replication factor 1 (--replication-factor)"
	if brokers == 1 {
		effective, source = 1, "one replica" // one broker holds one, whatever its default
	} else if factor == DefaultReplicationFactor {
		if effective, err = a.defaultReplicationFactor(ctx); err != nil {
			return err
		}
		source = fmt.Sprintf("the brokers' default.replication.factor (%d)", effective)
	}
	if effective == 1 && brokers > 1 && !r.AllowSingleReplica {
		want := min(3, brokers) // Kafka's usual 3 copies, at most one a broker
		fix := fmt.Sprintf("give --replication-factor %d", want)
		if factor == DefaultReplicationFactor {
			fix += fmt.Sprintf(", set default.replication.factor=%d on the brokers", want)
		}
		return fmt.Errorf("broker: creating %s with %s on a cluster of %d brokers: one replica means that losing the broker "+
			"that holds a partition loses its records, a changelog's among them, and with it which tasks ran; "+
			"%s, or give --allow-single-replica to create it anyway: %w", what, source, brokers, fix, ErrSingleReplica)
	}
	if minISR > int(effective) {
		return topicErr("creating %s: min.insync.replicas=%d is more than the %d replicas it would get (%s on %d brokers), so every write would fail: "+
			"lower min.insync.replicas or raise --replication-factor", what, minISR, effective, source, brokers)
	}
	return nil
}

// brokerCount returns how many brokers the cluster has, asked once.
func (a *Admin) brokerCount(ctx context.Context) (int, error) {
	a.repl.mu.Lock()
	defer a.repl.mu.Unlock()
	if a.repl.brokers > 0 {
		return a.repl.brokers, nil
	}
	m, err := a.adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("broker: counting the brokers, to check the replication of the topics to create: %w", a.conn.Explain(err))
	}
	a.repl.brokers, a.repl.nodes = max(1, len(m.Brokers)), m.Brokers.NodeIDs()
	return a.repl.brokers, nil
}

// defaultReplicationFactor returns the smallest default.replication.factor
// of the cluster's brokers (those brokerCount found), asked once. Each
// broker is asked for its own
// (the cluster-wide describe returns only dynamic values, not a broker's
// server.properties); the smallest is what a topic may get. A broker that
// does not answer is left out, as long as another does: Kafka lists a
// broker that died until its controller fences it, seconds later, and
// the count may be older still.
func (a *Admin) defaultReplicationFactor(ctx context.Context) (int16, error) {
	a.repl.mu.Lock()
	defer a.repl.mu.Unlock()
	if a.repl.defaultFactor > 0 {
		return a.repl.defaultFactor, nil
	}
	unreadable := func(err error) error {
		return fmt.Errorf("broker: reading the brokers' default.replication.factor, to check that the topics onceq creates "+
			"get more than one replica (this client needs DescribeConfigs on the cluster): %w; "+
			"give --replication-factor explicitly (3 for example) and onceq need not read it", err)
	}
	rcs, err := a.adm.DescribeBrokerConfigs(ctx, a.repl.nodes...) // with the answers of those that answered
	var least int64
	for _, rc := range rcs {
		if rc.Err != nil {
			err = cmp.Or(err, rc.Err)
			continue
		}
		var (
			value  int64
			source = kmsg.ConfigSource(-1)
		)
		for _, c := range rc.Configs {
			if c.Key != "default.replication.factor" || c.Value == nil {
				continue
			}
			// A broker answers with the value in force; some answer with
			// one entry per source, of which the first in Kafka's order
			// of precedence (dynamic before static before default) holds.
			if v, err := strconv.ParseInt(*c.Value, 10, 16); err == nil && v > 0 && precedes(c.Source, source) {
				value, source = v, c.Source
			}
		}
		if value > 0 && (least == 0 || value < least) {
			least = value
		}
	}
	if least == 0 {
		return 0, unreadable(cmp.Or(a.conn.Explain(err), errors.New("no broker reported it")))
	}
	a.repl.defaultFactor = int16(least)
	return a.repl.defaultFactor, nil
}

// precedes says whether a config from source s overrides one from source
// t (-1: none yet). Kafka numbers its sources in order of precedence,
// dynamic topic config (1) first, the default (5) last.
func precedes(s, t kmsg.ConfigSource) bool {
	rank := func(s kmsg.ConfigSource) int {
		if s <= 0 || s > kmsg.ConfigSourceDefaultConfig {
			return 100 + int(s) // unknown sources after the known ones; none at all last
		}
		return int(s)
	}
	if t < 0 {
		return true
	}
	return rank(s) < rank(t)
}
