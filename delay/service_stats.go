package delay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// Horizons are the due-within horizons of Stats and onceq_delay_due_within.
var Horizons = []struct {
	Name string
	D    time.Duration
}{{"1m", time.Minute}, {"1h", time.Hour}, {"1d", 24 * time.Hour}}

// BucketStats is what waits in one bucket.
type BucketStats struct {
	Bucket string `json:"bucket"`
	Topic  string `json:"topic"`
	// Waiting counts the tasks in the bucket that have not moved on: the
	// records past the group's committed offsets, less the records the
	// service moved out of offset order (its cursors say which),
	// transaction markers and aborted records, which take offsets and are
	// no tasks. See Exact.
	Waiting int64 `json:"waiting"`
	// Exact is false when a partition had more offsets to read than
	// Stats reads (StatsSampleOffsets, StatsSampleBytes) and its count is
	// estimated from the ones it read.
	Exact bool `json:"exact"`
	// DueWithin estimates how many of them fall due within each horizon
	// ("1m", "1h", "1d"); see Planner.DueWithin.
	DueWithin map[string]int64 `json:"due_within"`
}

// What Stats reads of a bucket partition: at most this many offsets and
// bytes past its committed offset; a partition with more waiting is
// counted from what was read, scaled to its offsets.
const (
	StatsSampleOffsets = 2_000
	StatsSampleBytes   = 4 << 20
)

// statsReadTimeout bounds the reading of one Stats call; partitions not
// read by then are counted by their offsets, and not exact.
const statsReadTimeout = 10 * time.Second

// Stats reads what waits in each bucket of the ladder for a delay service
// group. The offsets between a partition's committed offset and its last
// stable offset are not all tasks: each transaction that wrote to the
// partition left a marker, an aborted one left records no reader sees, and
// the service moves records out of offset order. So Stats reads those
// offsets as a read_committed consumer, at most StatsSampleOffsets and
// StatsSampleBytes of each partition, and counts the records that are
// tasks not yet moved. Buckets that do not exist yet wait for nothing.
func Stats(ctx context.Context, conn broker.Conn, p *Planner, group string) ([]BucketStats, error) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return nil, fmt.Errorf("delay: %w", err)
	}
	defer adm.Close()
	return stats(ctx, adm, conn, p, group)
}

// stats is Stats through adm, an admin client of conn's brokers.
func stats(ctx context.Context, adm *broker.Admin, conn broker.Conn, p *Planner, group string) ([]BucketStats, error) {
	topics := p.Topics()
	ends, err := adm.Kadm().ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("delay: end offsets of the buckets: %w", err)
	}
	starts, err := adm.Kadm().ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("delay: start offsets of the buckets: %w", err)
	}
	committed, err := adm.Kadm().FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // nothing moved yet
	}
	if err != nil {
		return nil, fmt.Errorf("delay: committed offsets of group %s: %w", group, err)
	}
	var spans []*broker.Span
	byTopic := map[string][]*broker.Span{}
	for i, b := range p.Buckets() {
		for _, end := range ends[topics[i]] {
			if end.Err != nil {
				continue
			}
			sp := &broker.Span{Topic: end.Topic, Partition: end.Partition, End: end.Offset}
			if s, ok := starts.Lookup(end.Topic, end.Partition); ok && s.Err == nil {
				sp.From = s.Offset
			}
			cur := cursor{Offset: -1, High: -1}
			if c, ok := committed.Lookup(end.Topic, end.Partition); ok && c.Err == nil && c.At >= 0 {
				if parsed, err := parseCursor(c.At, c.Metadata); err == nil {
					cur = parsed
				} else {
					cur = cursor{Offset: c.At, High: c.At}
				}
				sp.From = max(sp.From, c.At)
			}
			// A record the service moved out of offset order waits no more.
			sp.Skip = func(r *kgo.Record) bool {
				return cur.moved(r.Offset, func(sm time.Duration) int64 { return releaseOf(r, b, sm) })
			}
			spans = append(spans, sp)
			byTopic[end.Topic] = append(byTopic[end.Topic], sp)
		}
	}
	if err := broker.CountRecords(ctx, conn, spans, StatsSampleOffsets, StatsSampleBytes, statsReadTimeout); err != nil {
		return nil, fmt.Errorf("delay: reading the buckets: %w", err)
	}
	out := make([]BucketStats, 0, len(topics))
	for i, b := range p.Buckets() {
		st := BucketStats{Bucket: bucketLabel(b), Topic: topics[i], Exact: true, DueWithin: map[string]int64{}}
		for _, sp := range byTopic[topics[i]] {
			n, exact := sp.Counted()
			st.Waiting += n
			st.Exact = st.Exact && exact
		}
		for _, h := range Horizons {
			st.DueWithin[h.Name] = int64(float64(st.Waiting)*p.DueWithin(b, h.D) + 0.5)
		}
		out = append(out, st)
	}
	return out, nil
}

type serviceMetrics struct {
	waiting   *prometheus.GaugeVec
	dueWithin *prometheus.GaugeVec
	lateness  prometheus.Histogram
	moves     *prometheus.CounterVec
	held      prometheus.Gauge
	aborts    prometheus.Counter
	commit    prometheus.Histogram

	movesBy map[[2]string]prometheus.Counter // the loop's cache of moves
}

func newServiceMetrics(reg prometheus.Registerer) (*serviceMetrics, error) {
	m := &serviceMetrics{
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "onceq_delayed_tasks",
			Help: "Tasks waiting in each delay bucket: its end offsets minus the delay group's committed offsets (refreshed periodically)."}, []string{"bucket"}),
		dueWithin: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "onceq_delay_due_within",
			Help: "Estimated waiting tasks due within the horizon, from the buckets' waiting counts and sizes, assuming evenly spread delays."}, []string{"horizon"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "onceq_delay_lateness_seconds",
			Help: "Publish time (the commit of the transaction that wrote it to its queue) minus due time.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_delay_moves_total",
			Help: "Records moved out of a bucket (from), to a bucket, their queue (queue) or a dead-letter topic (dlq)."}, []string{"from", "to"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "onceq_delay_held_tasks",
			Help: "Records read ahead of their release and held in memory."}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_delay_txn_aborts_total",
			Help: "Transactions aborted (rebalances, failed writes); their records move again."}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "onceq_delay_commit_seconds",
			Help: "Time to write and commit one transaction of moves.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		movesBy: map[[2]string]prometheus.Counter{},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.waiting, m.dueWithin, m.lateness, m.moves, m.held, m.aborts, m.commit} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("delay: registering metrics (one service per registerer): %w", err)
		}
	}
	return m, nil
}

func (m *serviceMetrics) moved(from, to string) {
	k := [2]string{from, to}
	c := m.movesBy[k]
	if c == nil {
		c = m.moves.WithLabelValues(from, to)
		m.movesBy[k] = c
	}
	c.Inc()
}

// refreshStats sets onceq_delayed_tasks and onceq_delay_due_within every
// stats interval until ctx is done.
func (s *Service) refreshStats(ctx context.Context) {
	defer close(s.statsDone)
	t := time.NewTicker(s.cfg.statsInterval)
	defer t.Stop()
	// One client for every refresh: a client per refresh dials the
	// brokers and reads their metadata every time.
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		s.cfg.log.Warn("delay stats are not refreshed", "err", err)
		return
	}
	defer adm.Close()
	for {
		if st, err := stats(ctx, adm, s.cfg.conn, s.cfg.planner, s.cfg.group); err == nil {
			due := map[string]int64{}
			for _, b := range st {
				s.m.waiting.WithLabelValues(b.Bucket).Set(float64(b.Waiting))
				for h, n := range b.DueWithin {
					due[h] += n
				}
			}
			for h, n := range due {
				s.m.dueWithin.WithLabelValues(h).Set(float64(n))
			}
		} else if ctx.Err() == nil {
			s.cfg.log.Debug("refreshing delay stats", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
