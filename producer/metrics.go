package producer

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq"
)

// latencySample is how many submissions to a queue make one observation
// of onceq_submit_duration_seconds: a queue's first task and every 16th
// after it, and for SubmitMany a call's first task and every 16th after
// it. Acknowledgments run one at a time on the client's callback
// goroutine, and reading the clock and observing on each made it the
// producer's bottleneck: sampling one in 16 took SubmitAsync from 0.73 to
// 0.91 of raw franz-go (median of five runs of BenchmarkSubmitAsync each,
// with the atomic admission). The sample is chosen when the task is
// submitted, since only a sampled task reads the system clock for its
// submission time: the others take the shared millisecond clock's, too
// coarse for a latency.
const latencySample = 16

type metrics struct {
	aggregate bool // every series has queue "*" (MetricsPerQueue off)
	submitted *prometheus.CounterVec
	errors    *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer, aggregate bool) (*metrics, error) {
	m := &metrics{
		aggregate: aggregate,
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_tasks_submitted_total",
			Help: "Tasks the brokers acknowledged, by queue (delayed tasks count for their queue).",
		}, []string{"queue"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "onceq_submit_errors_total",
			Help: "Tasks refused, by queue and reason: invalid, no_queue, canceled, closed, broker, or aborted (in a transaction that did not commit). An invalid queue name is counted as queue \"\".",
		}, []string{"queue", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "onceq_submit_duration_seconds",
			Help:    "Time from submission to the brokers' acknowledgment, by queue: of a queue's first submitted task and every 16th after it (SubmitMany: a call's first and every 16th; a sample, onceq_tasks_submitted_total counts them all), and of each committed Tx.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"queue"}),
	}
	if reg == nil {
		return m, nil
	}
	var errs [3]error
	m.submitted, errs[0] = register(reg, m.submitted)
	m.errors, errs[1] = register(reg, m.errors)
	m.duration, errs[2] = register(reg, m.duration)
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("producer: registering metrics: %w", err)
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name, so that producers sharing a registry share their metrics.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// label is the queue label of queue's series.
func (m *metrics) label(queue string) string {
	if m.aggregate {
		return "*"
	}
	return queue
}

// fail counts a refused task.
func (m *metrics) fail(queue string, err error) {
	if onceq.ValidateQueue(queue) != nil {
		queue = "" // do not make a label of arbitrary input
	}
	queue = m.label(queue)
	m.errors.WithLabelValues(queue, reason(err)).Inc()
}
