package broker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// Group protocols a Member speaks (MemberConfig.Protocol).
const (
	// ClassicGroup is the client-driven group protocol with the
	// cooperative-sticky balancer: a rebalance moves only the partitions
	// that change owner. The member is static (its instance ID): a
	// restart takes its partitions back without a rebalance.
	ClassicGroup = "classic"
	// ConsumerGroup is KIP-848's protocol, where the broker assigns the
	// partitions (Kafka 4.0+; 4.3+ recommended). The member is dynamic: a
	// clean stop hands its partitions over at once, a crashed member's
	// move after the broker's group.consumer.session.timeout.ms.
	ConsumerGroup = "consumer"
)

// MemberConfig is how a Member joins its group and runs its transactions:
// the settings the worker and the delay service share, and the options
// in which they differ (Opts).
type MemberConfig struct {
	// Conn reaches the brokers.
	Conn Conn
	// Group is the consumer group. Required: a valid topic name.
	Group string
	// InstanceID names the member: its transactional ID is
	// "onceq-<Group>-<InstanceID>" and, with ClassicGroup, it is the
	// static member's instance ID. Required; two live members of one
	// group must never share it.
	InstanceID string
	// Protocol is ClassicGroup or ConsumerGroup. Required.
	Protocol string
	// SessionTimeout is how long a silent member keeps its partitions
	// (ClassicGroup; the broker's setting with ConsumerGroup). The
	// heartbeat is a third of it, at most 3s.
	SessionTimeout time.Duration
	// TransactionTimeout bounds an open transaction: the brokers abort
	// it after that. 1s or more and below SessionTimeout, so that a
	// member's open transaction ends before its partitions move.
	TransactionTimeout time.Duration
	// AtLeastOnce makes a member without transactions: a plain group
	// client, which Commit refuses; its user produces and commits
	// offsets with Client. Default off: a transactional member.
	AtLeastOnce bool
	// Log receives the client's warnings and the member's. Default:
	// discarded.
	Log *slog.Logger
	// Health follows the member's brokers and group (see MemberHealth).
	// Default: a new one, which no one reads.
	Health *MemberHealth
	// Assignment notes what each sync of ClassicGroup gives the member
	// (see Assignment; with ConsumerGroup no sync says, and it reports
	// every partition as the member's). The group callbacks may read it
	// from their first call on, before NewMember returns: give one (its
	// zero value is ready) to read it there. Default: a new one.
	Assignment *Assignment
	// Assigned is the group's OnPartitionsAssigned, called after
	// Health's join is noted; franz-go calls it after every join, with
	// nothing new too. Revoked is its OnPartitionsRevoked and, after
	// Health notes the loss, its OnPartitionsLost. They run while the
	// transact session holds its lock and must not wait for a commit.
	// Default: nothing.
	Assigned, Revoked func(context.Context, *kgo.Client, map[string][]int32)
	// Opts are the member's own client options: what it consumes, how it
	// fetches, how it places records. They come after the shared ones.
	Opts []kgo.Opt
}

// Check records in errs every setting of c that NewMember refuses, named
// as the worker's and the delay service's options name them: Group,
// TransactionTimeout and GroupProtocol. Their constructors call it, so
// that the refusal comes before anything connects, with the others.
func (c MemberConfig) Check(errs *onceq.OptionErrors) {
	if err := onceq.ValidateTopic(c.Group); err != nil {
		errs.Bad("Group", c.Group, "use letters, digits, '.', '_' or '-'")
	}
	if c.TransactionTimeout < time.Second || c.TransactionTimeout >= c.SessionTimeout {
		errs.Bad("TransactionTimeout", c.TransactionTimeout, "want 1s or more and below the session timeout (%v)", c.SessionTimeout)
	}
	if c.Protocol != ClassicGroup && c.Protocol != ConsumerGroup {
		errs.Bad("GroupProtocol", c.Protocol, "use %s or %s", ClassicGroup, ConsumerGroup)
	}
}

// TransactionalID is the transactional ID of the member of group whose
// instance ID is instance (MemberConfig.InstanceID).
func TransactionalID(group, instance string) string { return "onceq-" + group + "-" + instance }

// Member is one member of a consumer group that commits exactly once:
// franz-go's GroupTransactSession, made with the options every onceq group
// member shares, whose transactions (Commit) commit the offsets its user
// chooses in place of the position it polled to. The worker and the
// delay service are each one. Make it with NewMember; Leave or Close it.
type Member struct {
	cfg       MemberConfig
	cl        *kgo.Client
	sess      *kgo.GroupTransactSession // nil: AtLeastOnce
	closeOnce sync.Once
	fenced    chan struct{} // closed when the fence at start is done
	stopFence context.CancelFunc
}

// NewMember checks c, reporting every refused setting at once (wrapping
// ErrConfig), and makes the member's client, which joins the group at
// once. A transactional member also initializes its producer at once, in
// the background (see fence).
func NewMember(c MemberConfig) (*Member, error) {
	errs := onceq.OptionErrors{Pkg: "broker", Kind: ErrConfig}
	c.Check(&errs)
	if c.InstanceID == "" {
		errs.Missing("InstanceID", "empty: a member needs its own instance ID, from which its transactional ID derives")
	}
	errs.Add(c.Conn.Validate())
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Health == nil {
		c.Health = NewMemberHealth("broker", c.Group, c.SessionTimeout)
	}
	if c.Assignment == nil {
		c.Assignment = &Assignment{}
	}
	opts, err := c.clientOpts()
	if err != nil {
		return nil, err
	}
	m := &Member{cfg: c}
	if c.AtLeastOnce {
		if m.cl, err = kgo.NewClient(opts...); err != nil {
			return nil, fmt.Errorf("broker: creating client: %w", err)
		}
		return m, nil
	}
	opts = append(opts,
		kgo.TransactionalID(TransactionalID(c.Group, c.InstanceID)),
		kgo.TransactionTimeout(c.TransactionTimeout),
	)
	if m.sess, err = kgo.NewGroupTransactSession(opts...); err != nil {
		return nil, err
	}
	m.cl = m.sess.Client()
	var ctx context.Context
	ctx, m.stopFence = context.WithTimeout(context.Background(), c.TransactionTimeout)
	m.fenced = make(chan struct{})
	go m.fence(ctx)
	return m, nil
}

// fence initializes the member's transactional producer. Its
// InitProducerID fences the member's previous incarnation, a process of
// the same instance ID that crashed, and aborts that one's open
// transaction, which would otherwise keep the partitions it wrote to
// unreadable until the transaction timeout: franz-go initializes the
// producer only at the first transaction, and a restarted member may have
// nothing to commit for a long time. Nothing waits for it: a commit
// before it is done waits for the same initialization inside the client,
// and one that failed here is tried again there. It gives up after the
// transaction timeout, when the brokers have aborted that transaction
// themselves, or when the member closes.
func (m *Member) fence(ctx context.Context) {
	defer close(m.fenced)
	defer m.stopFence()
	if _, _, err := m.cl.ProducerID(ctx); err != nil && ctx.Err() == nil {
		m.cfg.Log.Debug("initializing the transactional producer at start failed; the first commit tries again",
			"group", m.cfg.Group, "instance", m.cfg.InstanceID, "err", err)
	}
}

// clientOpts are the client options of c's member but the transactional
// ones: the connection's, the group's, c.Opts last.
func (c MemberConfig) clientOpts() ([]kgo.Opt, error) {
	opts, err := c.Conn.Opts()
	if err != nil {
		return nil, err
	}
	assigned, revoked := c.Assigned, c.Revoked
	if assigned == nil {
		assigned = func(context.Context, *kgo.Client, map[string][]int32) {}
	}
	if revoked == nil {
		revoked = func(context.Context, *kgo.Client, map[string][]int32) {}
	}
	opts = append(opts,
		kgo.ConsumerGroup(c.Group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(c.SessionTimeout),
		// franz-go's default heartbeat (3s) must fit well in the session
		// (it refuses a session of 3s or less).
		kgo.HeartbeatInterval(min(3*time.Second, c.SessionTimeout/3)),
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			c.Health.client.Joined() // franz-go calls this after every join
			assigned(ctx, cl, m)
		}),
		kgo.OnPartitionsRevoked(revoked),
		kgo.OnPartitionsLost(c.Health.client.OnLost(revoked)),
		kgo.WithHooks(c.Health.client),
		kgo.ProducerLinger(0),
		kgo.WithLogger(KgoLogger(c.Log)),
	)
	if c.Protocol == ConsumerGroup {
		// Dynamic membership: a static member leaving with KIP-848 keeps
		// its partitions until the session times out.
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	} else {
		// franz-go's default balancer, whose syncs note what the member
		// owns (Assignment).
		opts = append(opts, kgo.InstanceID(c.InstanceID),
			kgo.Balancers(c.Assignment.track(kgo.CooperativeStickyBalancer())))
	}
	return append(opts, c.Opts...), nil
}

// Client is the member's client: for pausing, resuming and seeking its
// partitions, and, for an AtLeastOnce member, producing and committing.
// The transactions of a transactional member go through Commit.
func (m *Member) Client() *kgo.Client { return m.cl }

// Poll returns at most max records (see kgo.Client.PollRecords). It must
// not run concurrently with Commit.
func (m *Member) Poll(ctx context.Context, max int) kgo.Fetches {
	return m.cl.PollRecords(ctx, max)
}

// Leave closes the member's client and leaves the group for good, telling
// the brokers reason. A static member (ClassicGroup) does not leave when
// its client closes, so that a restart takes its partitions back without a
// rebalance; a clean shutdown says goodbye explicitly so that the others
// take over at once. A failure is logged: the session times out instead.
func (m *Member) Leave(ctx context.Context, reason string) {
	m.Close()
	if m.cfg.Protocol == ConsumerGroup {
		return // a dynamic member left when its client closed
	}
	adm, err := NewAdmin(m.cfg.Conn)
	if err != nil {
		return
	}
	defer adm.Close()
	if _, err := adm.Kadm().LeaveGroup(ctx, kadm.LeaveGroup(m.cfg.Group).InstanceIDs(m.cfg.InstanceID).Reason(reason)); err != nil {
		m.cfg.Log.Warn("leaving the group", "err", err)
	}
}

// Close closes the member's client. A static member stays in the group
// until its session times out (see Leave). Calling it again does nothing.
func (m *Member) Close() {
	m.closeOnce.Do(func() {
		if m.fenced != nil {
			m.stopFence()
			<-m.fenced
		}
		m.cl.Close()
	})
}
