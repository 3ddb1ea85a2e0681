package delay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/ops"
)

// maxPoll bounds the records one poll returns.
const maxPoll = 10_000

// Service moves delayed records on: out of the bucket topics, into the
// next bucket or their queue, each move in a Kafka transaction together
// with the offset commit. Create it with NewService and run it with Run;
// several instances of one group share the buckets.
//
// One goroutine reads every assigned bucket partition in offset order. A
// record is read into memory shortly before its release (ReleaseAt, read
// ahead by Planner.ReadAhead); a partition whose next record is further
// off is paused until then, so the service holds only the records about
// to move, however many wait. Every commit interval the records released
// by then move in one transaction: those due go to their queue (never
// before their due time: the check is against the service's clock when
// the transaction is built), the others to the bucket Planner.Route picks.
//
// Records move out of offset order, so the committed offset (the first
// record not moved) is not enough to know what moved. Each partition's
// offset commit carries a cursor as its metadata: the read position H and
// the transaction's time T. A record moved if and only if its offset is
// below H and its release is at or before T; both depend on the record
// alone. A restarted or new owner reads from the committed offset and
// skips the records the cursor says moved: no record is moved twice or
// lost, whatever fails.
type Service struct {
	cfg      serviceConfig
	m        *serviceMetrics
	smallest time.Duration

	// health is where Run is and whether the member reaches its brokers
	// and group; ready whether the loop took over an assignment. See
	// Healthy and Ready.
	health *broker.MemberHealth
	ready  atomic.Bool

	instanceID string
	member     *broker.Member
	cl         *kgo.Client // member's
	// synced is the assignment of the member's last sync, to find the
	// partitions it moved away without a revoke callback.
	synced   *broker.Assignment
	adm      *broker.Admin
	topics   *topicCache
	topicIDs map[string][16]byte

	// parts is the assignment, changed by the group callbacks; gen counts
	// the changes. The loop works on its own copy, view.
	mu    sync.Mutex
	parts map[tp]*part
	gen   atomic.Uint64

	view       map[tp]*part
	viewGen    uint64
	held       int // records read and not moved yet, in every partition; at most cfg.maxHeld
	lastCommit time.Time
	statsDone  chan struct{}
}

type tp struct {
	topic     string
	partition int32
}

// NewService checks the options and returns a service. It does not
// connect: Run does.
func NewService(opts ...ServiceOpt) (*Service, error) {
	cfg, err := buildService(opts)
	if err != nil {
		return nil, err
	}
	m, err := newServiceMetrics(cfg.registerer)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, m: m, smallest: cfg.planner.Smallest(), parts: map[tp]*part{}, view: map[tp]*part{},
		health: broker.NewMemberHealth("delay", cfg.group, cfg.sessionTimeout)}, nil
}

// Healthy returns nil while the service works: before Run, and while Run
// reaches the brokers and is a member of its group. It reports a service
// that heard from no broker for its session timeout, whose group session
// broke and was not joined again, or whose Run returned. It implements
// the health check of the command's /healthz.
func (s *Service) Healthy() error { return s.health.Healthy() }

// Ready returns nil once Run joined the group and loaded the committed
// cursors of its partitions, until it returns: the service moves records.
// It implements the readiness check of the command's /readyz.
func (s *Service) Ready() error { return s.health.Ready(s.ready.Load) }

// InstanceID is the instance ID Run uses, once Run has started.
func (s *Service) InstanceID() string { return s.instanceID }

// Run joins the group and moves records until ctx is done or a fatal
// error. On ctx done it commits what is released, leaves the group and
// returns nil. Records held in memory and not yet released stay in their
// bucket for the next owner. Run may be called once.
func (s *Service) Run(ctx context.Context) (err error) {
	if !s.health.Start() {
		return errors.New("delay: Run called twice: create another Service")
	}
	defer func() { s.health.Stop(err) }()
	if ok, err := ops.Start(ctx, s.cfg.log, s.start, s.close); !ok {
		return err
	}
	defer s.close()
	statsCtx, stopStats := context.WithCancel(ctx)
	defer stopStats()
	s.statsDone = make(chan struct{})
	go s.refreshStats(statsCtx)
	s.cfg.log.Info("delay service started", "group", s.cfg.group, "instance", s.instanceID,
		"buckets", FormatLadder(s.cfg.planner.Buckets()), "commit_interval", s.cfg.commitInterval)

	for ctx.Err() == nil {
		if err := s.refreshView(ctx); err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
		now := time.Now()
		s.wakeStopped(now)
		if s.commitDue(now) {
			if err := s.commit(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			continue
		}
		pctx, cancel := context.WithDeadline(ctx, s.nextWake(now))
		fs := s.member.Poll(pctx, maxPoll)
		cancel()
		if err := broker.FetchErr(fs); err != nil {
			return err
		}
		if err := s.ingest(ctx, fs); err != nil && ctx.Err() == nil {
			return err // a stop while ingest waits for offsets ends the loop
		}
	}
	stopStats()
	<-s.statsDone
	return s.shutdown()
}

// start connects, creates missing bucket topics and joins the group.
func (s *Service) start(ctx context.Context) error {
	var err error
	if s.adm, err = broker.NewAdmin(s.cfg.conn); err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	if s.cfg.planner, err = ClusterPlanner(ctx, s.cfg.conn, s.cfg.given); err != nil {
		return err
	}
	s.smallest = s.cfg.planner.Smallest()
	specs := []broker.TopicSpec{broker.WakeSpec()}
	for _, t := range s.cfg.planner.Topics() {
		specs = append(specs, broker.BucketSpec(t))
	}
	if _, err := s.adm.EnsureTopics(ctx, specs); err != nil {
		return fmt.Errorf("delay: creating the bucket and wake-up topics: %w", err)
	}
	if err := s.lookupTopicIDs(ctx); err != nil {
		return err
	}
	s.topics = newTopicCache(s.adm)
	if s.instanceID, err = loadInstanceID(s.cfg.stateDir, s.cfg.instanceID); err != nil {
		return err
	}
	mc := s.cfg.member()
	mc.InstanceID, mc.Health, mc.Assigned, mc.Revoked = s.instanceID, s.health, s.assigned, s.revoked
	// Before the client: the group callbacks read it from their first
	// call on.
	s.synced = &broker.Assignment{}
	mc.Assignment = s.synced
	mc.Opts = []kgo.Opt{
		// Every bucket topic, of this ladder or another: a process that
		// routed by an earlier ladder, or a bucket created since, is
		// read all the same, found within bucketRecheck.
		kgo.ConsumeRegex(),
		kgo.ConsumeTopics("^" + regexp.QuoteMeta(broker.DelayPrefix) + "[0-9]+(ms|s|m|h|d)$"),
		kgo.MetadataMaxAge(bucketRecheck),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		// A resumed partition joins the next fetch request: a short wait
		// keeps that well inside the read-ahead.
		kgo.FetchMaxWait(min(max(s.smallest/4, 10*time.Millisecond), 200*time.Millisecond)),
		kgo.FetchMaxBytes(8 << 20),
		kgo.FetchMaxPartitionBytes(256 << 10),
	}
	if s.member, err = broker.NewMember(mc); err != nil {
		return fmt.Errorf("delay: %w", err)
	}
	s.cl = s.member.Client()
	return nil
}

// idleWake bounds the service's poll while it has nothing to release nor
// to read on: what the poll waits for comes with records (the fetch ends
// the poll), or with a release that nextWake already counts.
const idleWake = time.Second

// bucketRecheck is how often the service looks for bucket topics created
// since it started.
const bucketRecheck = 10 * time.Second

// lookupTopicIDs learns the IDs of the bucket topics that exist, which the
// offset commits name.
func (s *Service) lookupTopicIDs(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The broker asked may not know a bucket created a moment ago through
	// another: ask again until it does (on Apache Kafka; the embedded
	// broker knows at once).
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		details, err := s.adm.Kadm().ListTopics(ctx)
		if err != nil {
			return fmt.Errorf("delay: reaching the brokers %v: %w", s.cfg.conn.Brokers, err)
		}
		ids := map[string][16]byte{}
		for name, d := range details {
			if _, ok := bucketOf(name); ok && d.Err == nil {
				ids[name] = d.ID
			}
		}
		missing := ""
		for _, t := range s.cfg.planner.Topics() {
			if _, ok := ids[t]; !ok {
				missing = t
				break
			}
		}
		if missing == "" {
			s.topicIDs = ids
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("delay: bucket topic %s: not found after its creation", missing)
		case <-time.After(wait):
		}
	}
}

// assigned and revoked are the group's callbacks (the member notes the
// join first); revoked is also called for partitions lost with the group
// session. They run while the session holds its lock and must not wait
// for the loop.
func (s *Service) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.mu.Lock()
	for topic, ps := range m {
		b, ok := s.cfg.planner.Bucket(topic)
		if !ok {
			if b, ok = bucketOf(topic); !ok {
				continue
			}
		}
		for _, p := range ps {
			k := tp{topic, p}
			if old := s.parts[k]; old != nil {
				old.revoked.Store(true)
			}
			s.parts[k] = newPart(s.cfg.planner, topic, p, b)
		}
	}
	// The sync before this call may have taken partitions without a
	// revoke callback (see broker.Assignment): they go as revoked ones do.
	for k, old := range s.parts {
		if !s.synced.Has(k.topic, k.partition) {
			old.revoked.Store(true)
			delete(s.parts, k)
		}
	}
	s.mu.Unlock()
	s.gen.Add(1)
	s.cfg.log.Info("partitions assigned", "partitions", m)
}

func (s *Service) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.release(m, nil)
	s.cfg.log.Info("partitions revoked", "partitions", m)
}

// release lets go of the partitions of m whose part only accepts (every
// one for a nil only), and returns those it let go.
func (s *Service) release(m map[string][]int32, only func(*part) bool) []tp {
	var released []tp
	s.mu.Lock()
	for topic, ps := range m {
		for _, p := range ps {
			k := tp{topic, p}
			if old := s.parts[k]; old != nil && (only == nil || only(old)) {
				old.revoked.Store(true)
				delete(s.parts, k)
				released = append(released, k)
			}
		}
	}
	s.mu.Unlock()
	s.gen.Add(1)
	return released
}

// refreshView takes over assignment changes: drops revoked partitions,
// resumes new ones (a pause outlives an assignment) and loads their
// committed cursors.
func (s *Service) refreshView(ctx context.Context) error {
	gen := s.gen.Load()
	if gen == s.viewGen {
		return nil
	}
	s.mu.Lock()
	view := make(map[tp]*part, len(s.parts))
	for k, p := range s.parts {
		view[k] = p
	}
	s.mu.Unlock()
	for k, p := range s.view {
		if view[k] != p {
			s.held -= p.unmoved()
		}
	}
	var fresh []*part
	resume := map[string][]int32{}
	for k, p := range view {
		if s.view[k] != p {
			fresh = append(fresh, p)
			resume[k.topic] = append(resume[k.topic], k.partition)
		}
	}
	s.cl.ResumeFetchPartitions(resume)
	s.view, s.viewGen = view, gen
	if err := s.loadCursors(ctx, fresh); err != nil {
		return err
	}
	if s.health.HasJoined() {
		s.ready.Store(true)
	}
	return nil
}

// loadCursors reads the committed offsets and cursors of new partitions.
// The fetch requires stable offsets: a transaction of the previous owner
// that is still open is waited for.
func (s *Service) loadCursors(ctx context.Context, fresh []*part) error {
	if len(fresh) == 0 {
		return nil
	}
	for {
		offs, err := s.adm.Kadm().FetchOffsets(kadm.RequireStable(ctx), s.cfg.group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			offs, err = nil, nil // nothing committed yet
		}
		for _, p := range fresh {
			if o, ok := offs.Lookup(p.topic, p.partition); ok && o.Err != nil && err == nil {
				err = fmt.Errorf("%s/%d: %w", p.topic, p.partition, o.Err)
			}
		}
		if err == nil {
			for _, p := range fresh {
				s.loadCursor(p, offs)
			}
			return nil
		}
		s.cfg.log.Info("waiting for committed offsets", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Service) loadCursor(p *part, offs kadm.OffsetResponses) {
	c := cursor{Offset: -1, High: -1}
	if o, ok := offs.Lookup(p.topic, p.partition); ok && o.At >= 0 {
		var err error
		if c, err = parseCursor(o.At, o.Metadata); err != nil {
			s.cfg.log.Warn("ignoring offset metadata that is not the delay service's", "topic", p.topic, "partition", p.partition, "err", err)
		}
	}
	p.committed, p.next, p.loaded = c, c.Offset, true
	if c.High > c.Offset {
		// Records above the offset moved by the release times of the
		// committed smallest bucket: keep to it until the partition has
		// nothing above its offset again.
		p.smallest = time.Duration(c.Smallest) * time.Millisecond
	}
	s.cfg.log.Debug("partition cursor loaded", "topic", p.topic, "partition", p.partition,
		"offset", c.Offset, "high", c.High, "time", c.Time, "smallest_ms", c.Smallest)
}

// commitDue reports whether a transaction is to be made now: records are
// released and the commit interval has passed, or the held budget is full.
func (s *Service) commitDue(now time.Time) bool {
	nowMS := now.UnixMilli()
	n := 0
	for _, p := range s.view {
		if rel, ok := p.nextRelease(); ok && rel <= nowMS && p.committable(nowMS) {
			n++
		}
	}
	return n > 0 && (now.Sub(s.lastCommit) >= s.cfg.commitInterval || s.held >= s.cfg.maxHeld)
}

// nextWake is when the loop has something to do without new records: the
// next release in a partition that may commit (not before the commit
// interval is up), or in one whose committed cursor's time comes (a
// previous owner's clock ahead of this one's), or the next stopped
// partition to read on; idleWake at the latest. It is never now or
// earlier: a poll whose context is done returns no records at all, and a
// partition that may not commit yet waits for records to read.
func (s *Service) nextWake(now time.Time) time.Time {
	wake := now.Add(idleWake)
	earliest := s.lastCommit.Add(s.cfg.commitInterval)
	nowMS := now.UnixMilli()
	for _, p := range s.view {
		if rel, ok := p.nextRelease(); ok {
			at := wake
			switch {
			case p.committable(nowMS):
				at = later(time.UnixMilli(rel), earliest)
			case nowMS < p.committed.Time && p.committable(p.committed.Time):
				at = time.UnixMilli(p.committed.Time)
			}
			if at.Before(wake) {
				wake = at
			}
		}
		if p.stopped && !p.budget && p.wake.Before(wake) {
			wake = p.wake
		}
	}
	return later(wake, now.Add(time.Millisecond))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// shutdown commits what is released and leaves the group.
func (s *Service) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.txnTimeout)
	defer cancel()
	err := s.commit(ctx)
	s.member.Leave(ctx, "onceq delay service shutdown")
	s.cfg.log.Info("delay service stopped", "instance", s.instanceID)
	return err
}

func (s *Service) close() {
	if s.member != nil {
		s.member.Close()
	}
	if s.adm != nil {
		s.adm.Close()
	}
}
