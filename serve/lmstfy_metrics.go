package serve

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// lmstfyPool is the pool label of lmstfy's series: onceq has one.
const lmstfyPool = "default"

// lmstfyMetrics are the series lmstfy's server exports under the names
// its dashboards read: its HTTP API's (infra_lmstfy_http_*) and the
// job counts of its engine (infra_lmstfy_redis_*, as lmstfy names them
// whatever keeps the jobs). Its Redis gauges (memory, keys, connections)
// and queue sizes have no counterpart here: onceq's own series
// (onceq_*) tell the same. They live in a registry of their own, served
// by the admin API alone, and are kept only once AdminHandler is asked
// for: a server without an admin API pays nothing for them, and onceq's
// /metrics carries no per-queue series. A nil *lmstfyMetrics counts
// nothing.
type lmstfyMetrics struct {
	reg        *prometheus.Registry
	latency    *prometheus.HistogramVec // ms, answers below 300
	codes      *prometheus.CounterVec
	rateLimits *prometheus.CounterVec
	published  *prometheus.CounterVec // by pool
	consumed   *prometheus.CounterVec
	multi      *prometheus.CounterVec // jobs of consumes of several queues
	pubQueue   *prometheus.CounterVec // by pool, namespace and queue
	conQueue   *prometheus.CounterVec
	elapsed    *prometheus.HistogramVec // ms from publish to consume
}

func newLmstfyMetrics() *lmstfyMetrics {
	http := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "infra", Subsystem: "lmstfy_http", Name: name, Help: help}, labels)
	}
	engine := func(name string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "infra", Subsystem: "lmstfy_redis", Name: name, Help: name + " (lmstfy's series)"},
			append([]string{"pool"}, labels...))
	}
	m := &lmstfyMetrics{
		reg: prometheus.NewRegistry(),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "infra", Subsystem: "lmstfy_http", Name: "latency_milliseconds",
			Help: "rest api latencies (lmstfy's series)", Buckets: prometheus.ExponentialBuckets(15, 2.5, 9)}, []string{"pool", "namespace", "api", "method"}),
		codes:      http("http_codes", "rest api response code (lmstfy's series)", "pool", "namespace", "api", "method", "code"),
		rateLimits: http("rate_limit", "consume/produce rate limit (lmstfy's series)", "pool", "namespace", "token", "action"),
		published:  engine("publish_jobs"),
		consumed:   engine("consume_jobs"),
		multi:      engine("consume_multi_jobs"),
		pubQueue:   engine("publish_queue_jobs", "namespace", "queue"),
		conQueue:   engine("consume_queue_jobs", "namespace", "queue"),
		elapsed: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "infra", Subsystem: "lmstfy_redis", Name: "job_elapsed_ms",
			Help: "job_elapsed_ms (lmstfy's series)"}, []string{"pool", "namespace", "queue"}),
	}
	m.reg.MustRegister(m.latency, m.codes, m.rateLimits, m.published, m.consumed, m.multi, m.pubQueue, m.conQueue, m.elapsed)
	return m
}

// lmstfyAPI is a route's path as lmstfy's api label names it (gin's
// pattern): /api/:namespace/:queue/job/:job_id.
func lmstfyAPI(path string) string {
	return strings.NewReplacer("{ns}", ":namespace", "{queue}", ":queue", "{id}", ":job_id", "{name}", ":name").Replace(path)
}

// request counts an answered request of route rt as lmstfy does.
func (m *lmstfyMetrics) request(rt route, ns string, status int, took time.Duration, token string) {
	if m == nil {
		return
	}
	api := lmstfyAPI(rt.path)
	if status < 300 {
		m.latency.WithLabelValues(lmstfyPool, ns, api, rt.method).Observe(float64(took) / float64(time.Millisecond))
	}
	m.codes.WithLabelValues(lmstfyPool, ns, api, rt.method, strconv.Itoa(status)).Inc()
	if status == 429 && token != "" {
		action := "consume"
		if rt.need == write && rt.method != "GET" {
			action = "produce"
		}
		m.rateLimits.WithLabelValues(lmstfyPool, ns, token, action).Inc()
	}
}

// publish counts a job published to queue of namespace ns.
func (m *lmstfyMetrics) publish(ns, queue string) {
	if m == nil {
		return
	}
	m.published.WithLabelValues(lmstfyPool).Inc()
	m.pubQueue.WithLabelValues(lmstfyPool, ns, queue).Inc()
}

// consume counts a job handed out, elapsed after its publish, by a
// consume of queues queues.
func (m *lmstfyMetrics) consume(ns, queue string, elapsed time.Duration, queues int) {
	if m == nil {
		return
	}
	m.consumed.WithLabelValues(lmstfyPool).Inc()
	if queues > 1 {
		m.multi.WithLabelValues(lmstfyPool).Inc()
	}
	m.conQueue.WithLabelValues(lmstfyPool, ns, queue).Inc()
	m.elapsed.WithLabelValues(lmstfyPool, ns, queue).Observe(float64(elapsed) / float64(time.Millisecond))
}
