package delay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

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
	// Waiting counts the bucket's offsets past the group's committed
	// offsets: the records not yet moved on, plus at most one transaction
	// marker per partition, and records the service moved out of offset
	// order whose partition's offset has not passed them yet.
	Waiting int64 `json:"waiting"`
	// DueWithin estimates how many of them fall due within each horizon
	// ("1m", "1h", "1d"); see Planner.DueWithin.
	DueWithin map[string]int64 `json:"due_within"`
}

// Stats reads what waits in each bucket of the ladder for a delay service
// group: its committed offsets against the buckets' end offsets. Buckets
// that do not exist yet wait for nothing.
func Stats(ctx context.Context, adm *broker.Admin, p *Planner, group string) ([]BucketStats, error) {
	topics := p.Topics()
	ends, err := adm.Kadm().ListEndOffsets(ctx, topics...)
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
	out := make([]BucketStats, 0, len(topics))
	for i, b := range p.Buckets() {
		st := BucketStats{Bucket: bucketLabel(b), Topic: topics[i], DueWithin: map[string]int64{}}
		for _, end := range ends[topics[i]] {
			if end.Err != nil {
				continue
			}
			from := int64(0)
			if s, ok := starts.Lookup(end.Topic, end.Partition); ok && s.Err == nil {
				from = s.Offset
			}
			if c, ok := committed.Lookup(end.Topic, end.Partition); ok && c.Err == nil && c.At > from {
				from = c.At
			}
			st.Waiting += max(0, end.Offset-from)
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
	for {
		if st, err := Stats(ctx, s.adm, s.cfg.planner, s.cfg.group); err == nil {
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
