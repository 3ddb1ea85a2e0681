package consumer

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	processed *prometheus.CounterVec
	handler   prometheus.Histogram
	latency   prometheus.Histogram
	lag       *prometheus.GaugeVec
	commit    *prometheus.HistogramVec
	aborts    prometheus.Counter
	restore   prometheus.Histogram
	inflight  prometheus.Gauge
	failed    *prometheus.CounterVec
	dead      *prometheus.CounterVec
	abandoned prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_tasks_processed_total",
			Help: "Tasks processed, by queue and outcome (success, failed, duplicate)."}, []string{"queue", "outcome"}),
		handler: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "onceq_handler_duration_seconds",
			Help: "Time in the handler per run.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12)}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "onceq_task_latency_seconds",
			Help: "From a task's due (or enqueue) time to its handler's start.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "onceq_consumer_lag",
			Help: "Records behind the high watermark, by queue and partition."}, []string{"queue", "partition"}),
		commit: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "onceq_commit_duration_seconds",
			Help: "Commit time by stage: kafka (the transaction) and pebble (the checkpoint).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"stage"}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_txn_aborts_total",
			Help: "Commits aborted (rebalances, failed writes); their tasks run again."}),
		restore: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "onceq_checkpoint_restore_seconds",
			Help: "Time to catch a partition's checkpoint up with its changelog.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "onceq_inflight_tasks", Help: "Handlers running now."}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_handler_failures_total",
			Help: "Handler runs that failed (each then retried or dead-lettered), by queue."}, []string{"queue"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "onceq_dead_letters_total",
			Help: "Tasks dead-lettered, by queue and reason (failed, max_attempts, expired, malformed)."}, []string{"queue", "reason"}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{Name: "onceq_abandoned_handlers",
			Help: "Handlers that ignored their canceled context past their time-to-run and grace."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.processed, m.handler, m.latency, m.lag, m.commit, m.aborts, m.restore, m.inflight, m.failed, m.dead, m.abandoned} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("consumer: registering metrics (one worker per registerer): %w", err)
		}
	}
	return m, nil
}
