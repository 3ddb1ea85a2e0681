package periodic

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	schedules prometheus.Gauge
	submitted *prometheus.CounterVec
	late      *prometheus.CounterVec
	skipped   *prometheus.CounterVec
	errors    *prometheus.CounterVec
	lastTick  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	label := []string{"schedule"}
	m := &metrics{
		schedules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "onceq_periodic_schedules",
			Help: "Schedules the scheduler follows.",
		}),
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_periodic_ticks_submitted_total",
			Help: "Ticks this scheduler submitted, by schedule (every scheduler submits every tick; workers run each once).",
		}, label),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_periodic_ticks_late_total",
			Help: "Missed ticks this scheduler caught up on, by schedule: submitted later than the lead time after their tick.",
		}, label),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_periodic_ticks_skipped_total",
			Help: "Missed ticks this scheduler skipped, by schedule: by the skip policy, or beyond the catch-up bound.",
		}, label),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_periodic_submit_errors_total",
			Help: "Submissions of ticks that failed, by schedule; they are retried.",
		}, label),
		lastTick: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "onceq_periodic_last_tick_timestamp_seconds",
			Help: "The latest tick this scheduler submitted, by schedule, in unix seconds.",
		}, label),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.schedules, m.submitted, m.late, m.skipped, m.errors, m.lastTick} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("periodic: registering metrics: %w", err)
	}
	return m, nil
}

// forget drops a removed schedule's series.
func (m *metrics) forget(name string) {
	for _, v := range []*prometheus.MetricVec{m.submitted.MetricVec, m.late.MetricVec, m.skipped.MetricVec, m.errors.MetricVec, m.lastTick.MetricVec} {
		v.DeleteLabelValues(name)
	}
}
