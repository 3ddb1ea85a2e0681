package consumer

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
)

type metrics struct {
	processed *prometheus.CounterVec
	handler   prometheus.Histogram
	latency   *prometheus.HistogramVec
	commit    *prometheus.HistogramVec
	aborts    prometheus.Counter
	restore   prometheus.Histogram
	inflight  *prometheus.GaugeVec
	failed    *prometheus.CounterVec
	dead      *prometheus.CounterVec
	abandoned prometheus.Counter
	ahead     prometheus.Counter
	aheadRead prometheus.Counter
	canceled  prometheus.Counter
	expired   prometheus.Counter
	paused    *prometheus.GaugeVec
	limited   *prometheus.GaugeVec
	limitWait *prometheus.HistogramVec
	quiet     prometheus.Gauge
	wanted    prometheus.Gauge
	bounded   prometheus.GaugeFunc
	held      prometheus.GaugeFunc
	unwanted  prometheus.GaugeFunc
	progress  *progressCollector
}

func newMetrics(reg prometheus.Registerer, w *Worker) (*metrics, error) {
	m := &metrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_tasks_processed_total",
			Help: "Tasks processed, by queue and outcome (success, duplicate, retried, snoozed, released, dead, expired, canceled, forwarded)."}, []string{"queue", "outcome"}),
		handler: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "onceq_handler_duration_seconds",
			Help: "Time in the handler per run.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12)}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "onceq_task_latency_seconds",
			Help:    "From a task's due (or enqueue) time to its handler's start, by queue.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"queue"}),
		commit: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "onceq_commit_duration_seconds",
			Help: "Commit time by stage: kafka (the transaction) and pebble (the checkpoint).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"stage"}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_txn_aborts_total",
			Help: "Commits aborted (rebalances, failed writes); their results are committed by a later one, or run again on the partitions' next owners."}),
		restore: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "onceq_checkpoint_restore_seconds",
			Help: "Time to catch a partition's checkpoint up with its changelog.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "onceq_inflight_tasks",
			Help: "Handlers running now, by queue."}, []string{"queue"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_handler_failures_total",
			Help: "Handler runs that failed (each then retried or dead-lettered), by queue."}, []string{"queue"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_dead_letters_total",
			Help: "Tasks dead-lettered, by queue and reason (failed, max_attempts, expired, malformed, too_large)."}, []string{"queue", "reason"}),
		ahead: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_tasks_read_ahead_total",
			Help: "Tasks of a priority above 0 started ahead of their partition's fetch position, read by the lookahead past a backlog."}),
		aheadRead: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_lookahead_records_read_total",
			Help: "Records the lookahead read past a backlog, in topics that use priorities: what reading ahead costs."}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_abandoned_handlers",
			Help: "Handlers that ignored their canceled context past their time-to-run and grace."}),
		canceled: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_shutdown_canceled_tasks_total",
			Help: "Tasks still running at the shutdown timeout, canceled to run again on the partitions' next owners."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_processed_ids_expired_total",
			Help: "Idempotency keys forgotten past the dedup window (a duplicate submitted later runs again)."}),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "onceq_queue_paused",
			Help: "1 while the queue is paused (onceq queue pause): the worker fetches and starts none of its tasks."}, []string{"queue"}),
		limited: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "onceq_limit_waiting_tasks",
			Help: "Tasks that wait in their slot for their queue's limit (onceq queue limit): its rate or its running tasks, by queue."}, []string{"queue"}),
		limitWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "onceq_limit_wait_seconds",
			Help:    "How long a task of a limited queue waited for its limit before it started, by queue.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"queue"}),
		quiet: prometheus.NewGauge(prometheus.GaugeOpts{Name: "onceq_quiet_partitions",
			Help: "Partitions the worker does not fetch because they had no task for a while; a wake-up or a new record makes them fetched again."}),
		wanted: prometheus.NewGauge(prometheus.GaugeOpts{Name: "onceq_wanted_queues",
			Help: "Queues wanted now (Worker.Want), whose partitions an on-demand worker fetches."}),
		held: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "onceq_paused_waiting_tasks",
			Help: "Tasks of paused lane queues that wait, outside the slots, for their queue to be resumed."},
			func() float64 { return float64(w.sched.paused.waiting.Load()) }),
		unwanted: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "onceq_unwanted_waiting_tasks",
			Help: "Tasks of lane queues nobody wants that an on-demand worker holds, outside the slots, for a Want of their queue (OnDemandLine)."},
			func() float64 { return float64(w.sched.unwanted.waiting.Load()) }),
		bounded: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "onceq_bound_waiting_tasks",
			Help: "Tasks ready to start that wait, outside the slots, for a task of their queue to finish (MaxRunningPerQueue)."},
			func() float64 {
				if b := w.sched.bound; b != nil {
					return float64(b.waiting.Load())
				}
				return 0
			}),
		progress: &progressCollector{w: w,
			oldest: prometheus.NewDesc("onceq_oldest_inflight_seconds",
				"Age of the oldest handler running now, by queue (0 when none runs).", []string{"queue"}, nil),
			open: prometheus.NewDesc("onceq_open_records",
				"Records fetched and not finished (running or waiting to start), by queue and partition.", []string{"queue", "partition"}, nil),
			ready: prometheus.NewDesc("onceq_ready_tasks",
				"Tasks that may start and wait for a free slot, by priority (the highest start first).", []string{"priority"}, nil),
			lag: prometheus.NewDesc("onceq_consumer_lag",
				"Records behind the high watermark at the last fetch, by queue and partition.", []string{"queue", "partition"}, nil),
			above: prometheus.NewDesc("onceq_finished_above_committed",
				"Records finished above their partition's committed offset: held there by an unfinished one, found by their marks after a restart; by queue and partition.",
				[]string{"queue", "partition"}, nil),
		},
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.processed, m.handler, m.latency, m.commit, m.aborts, m.restore,
		m.inflight, m.failed, m.dead, m.abandoned, m.ahead, m.aheadRead, m.canceled, m.expired, m.paused, m.limited, m.limitWait, m.quiet, m.wanted, m.bounded, m.held, m.unwanted, m.progress} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("consumer: registering metrics (one worker per registerer): %w", err)
		}
	}
	return m, nil
}

// forget drops a revoked partition's series.
// progressCollector reads, at scrape time, the worker's running handlers
// and its partitions' open records.
type progressCollector struct {
	w                        *Worker
	oldest, open, above, lag *prometheus.Desc
	ready                    *prometheus.Desc
}

func (c *progressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.oldest
	ch <- c.open
	ch <- c.above
	ch <- c.lag
	ch <- c.ready
}

func (c *progressCollector) Collect(ch chan<- prometheus.Metric) {
	oldest := map[string]time.Duration{}
	c.w.mu.Lock()
	for q := range c.w.byQueue {
		oldest[c.w.qlabel(q)] = 0
	}
	c.w.mu.Unlock()
	for p := range c.w.sched.ready.levels {
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(c.w.sched.ready.waiting(p)), strconv.Itoa(p))
	}
	now := time.Now()
	c.w.sched.running(func(r *handlerRun) {
		q := c.w.qlabel(r.it.rec.Topic)
		oldest[q] = max(oldest[q], now.Sub(r.started))
	})
	for q, d := range oldest {
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, d.Seconds(), q)
	}
	// Per partition, or summed over all of them under "*".
	var open, above, lag int
	for _, ps := range c.w.snapshotParts() {
		o, a := ps.progress()
		l := int(ps.lag.Load())
		if !c.w.cfg.metricsPerQueue {
			open, above, lag = open+o, above+a, lag+l
			continue
		}
		p := strconv.Itoa(int(ps.tp.Partition))
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(o), ps.tp.Topic, p)
		ch <- prometheus.MustNewConstMetric(c.above, prometheus.GaugeValue, float64(a), ps.tp.Topic, p)
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(l), ps.tp.Topic, p)
	}
	if !c.w.cfg.metricsPerQueue {
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(open), allQueues, allQueues)
		ch <- prometheus.MustNewConstMetric(c.above, prometheus.GaugeValue, float64(above), allQueues, allQueues)
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(lag), allQueues, allQueues)
	}
}

// allQueues is the queue (and partition) label of every series when the
// worker's metrics are not per queue (MetricsPerQueue).
const allQueues = "*"

// qlabel is the queue label of queue's series: the queue's topic (the
// lane, for a lane queue, so that a lane's labels add no series), or
// allQueues.
func (w *Worker) qlabel(queue string) string {
	if w.cfg.metricsPerQueue {
		return onceq.QueueTopic(queue)
	}
	return allQueues
}
