// Package grafana holds onceq's Grafana dashboard, onceq.json: workers,
// the delay service, producers and onceq serve, from their Prometheus
// metrics. Import it into Grafana with a Prometheus data source. Its test
// checks that every metric and label it queries exists.
package grafana
