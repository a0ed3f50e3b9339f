// Package dlmprom records the dlm client's metrics in Prometheus.
//
//	m := dlmprom.New(prometheus.DefaultRegisterer)
//	c := dlm.New(store, dlm.WithMetrics(m))
//
// The metrics, each labelled by store:
//
//	dlm_client_acquire_duration_seconds{outcome}  histogram of Acquire calls
//	dlm_client_acquires_total{outcome}            acquired, contended, failed
//	dlm_client_renewals_total{result}             ok, failed
//	dlm_client_releases_total
//	dlm_client_lost_total
package dlmprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlmhq/dlm"
)

// Metrics implements dlm.Metrics with Prometheus collectors.
type Metrics struct {
	latency  *prometheus.HistogramVec
	acquires *prometheus.CounterVec
	renewals *prometheus.CounterVec
	releases *prometheus.CounterVec
	lost     *prometheus.CounterVec
}

var _ dlm.Metrics = (*Metrics)(nil)

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "dlm", Subsystem: "client", Name: "acquire_duration_seconds",
			Help:    "Duration of Acquire calls, waiting included, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs .. 26s
		}, []string{"store", "outcome"}),
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dlm", Subsystem: "client", Name: "acquires_total",
			Help: "Acquire calls by outcome: acquired, contended (held by another until the wait ended), failed.",
		}, []string{"store", "outcome"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dlm", Subsystem: "client", Name: "renewals_total",
			Help: "Automatic renewals by result: ok or failed.",
		}, []string{"store", "result"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dlm", Subsystem: "client", Name: "releases_total",
			Help: "Releases that reached the store.",
		}, []string{"store"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dlm", Subsystem: "client", Name: "lost_total",
			Help: "Leases lost: expired unrenewed, taken, or the store unreachable past their validity.",
		}, []string{"store"}),
	}
	reg.MustRegister(m.latency, m.acquires, m.renewals, m.releases, m.lost)
	return m
}

// Acquired implements dlm.Metrics.
func (m *Metrics) Acquired(store string, o dlm.Outcome, d time.Duration) {
	m.latency.WithLabelValues(store, string(o)).Observe(d.Seconds())
	m.acquires.WithLabelValues(store, string(o)).Inc()
}

// Renewed implements dlm.Metrics.
func (m *Metrics) Renewed(store string, ok bool) {
	result := "ok"
	if !ok {
		result = "failed"
	}
	m.renewals.WithLabelValues(store, result).Inc()
}

// Released implements dlm.Metrics.
func (m *Metrics) Released(store string) { m.releases.WithLabelValues(store).Inc() }

// Lost implements dlm.Metrics.
func (m *Metrics) Lost(store string) { m.lost.WithLabelValues(store).Inc() }
