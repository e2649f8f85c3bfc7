package inspect

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasectl/leasectl/leasestore"
)

// Metrics are the reaper's Prometheus metrics, on a registry of their own:
// nothing is registered globally and no Go or process collector is added,
// so building a Metrics is the only cost and only `scan --metrics-addr`
// pays it. A nil *Metrics records nothing.
type Metrics struct {
	registry    *prometheus.Registry
	recovered   prometheus.Counter
	staleFor    prometheus.Histogram
	runs        prometheus.Counter
	failures    prometheus.Counter
	quarantined prometheus.Gauge
	inflight    prometheus.Gauge
}

// staleBuckets span a scan right after the liveness expired (sub-second
// TTLs) to evidence about to expire (the default evidence TTL is an hour).
var staleBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// NewMetrics builds the reaper's metrics on a new registry.
func NewMetrics() (*Metrics, error) {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasectl_recovered_crashes_total",
			Help: "Crashed runs (evidence without liveness) this reaper found and counted.",
		}),
		staleFor: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasectl_stale_duration_seconds",
			Help:    "How long a crashed run had been without liveness when the reaper found it.",
			Buckets: staleBuckets,
		}),
		runs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasectl_reaper_runs_total",
			Help: "Scan passes this reaper ran, failed ones included.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasectl_reaper_errors_total",
			Help: "Scan passes that failed, most often because the store was unreachable.",
		}),
		quarantined: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasectl_quarantined_jobs",
			Help: "Jobs in quarantine in the store, as of the last successful pass.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasectl_inflight_jobs",
			Help: "Live leases in the store, as of the last successful pass.",
		}),
	}
	for _, c := range []prometheus.Collector{m.recovered, m.staleFor, m.runs, m.failures, m.quarantined, m.inflight} {
		if err := m.registry.Register(c); err != nil {
			return nil, fmt.Errorf("register reaper metrics: %w", err)
		}
	}
	return m, nil
}

// Gatherer is the registry the metrics live on, for tests and embedding.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.registry }

func (m *Metrics) observeRun() {
	if m == nil {
		return
	}
	m.runs.Inc()
}

func (m *Metrics) observeCrashes(crashes []leasestore.Crash) {
	if m == nil {
		return
	}
	for i := range crashes {
		m.recovered.Inc()
		m.staleFor.Observe(staleFor(&crashes[i], crashes[i].DetectedAt).Seconds())
	}
}

func (m *Metrics) observeFailure() {
	if m == nil {
		return
	}
	m.failures.Inc()
}

func (m *Metrics) observeCounts(c leasestore.Counts) {
	m.inflight.Set(float64(c.InFlight))
	m.quarantined.Set(float64(c.Quarantined))
}

// shutdownTimeout bounds how long a stopping reaper waits for a scrape in
// progress: long enough for one scrape of six metrics, short enough that
// SIGTERM ends the process promptly.
const shutdownTimeout = 2 * time.Second

// Serve serves the metrics at /metrics on ln until ctx is done, then shuts
// the server down and returns nil. It returns the server's error if it
// stops by itself.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve metrics on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			// A scrape outlived the grace period: drop it.
			return srv.Close()
		}
		return nil
	}
}
