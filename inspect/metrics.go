package inspect

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Metrics are the reaper's Prometheus metrics, written in the text
// exposition format (version 0.0.4) by hand.
//
// Why not the official client: its packages register Go and process
// collectors and protobuf descriptors when the program starts, which cost
// every leasectl process about 1.3 ms (measured: an empty Go binary starts
// in 1.1 ms, one that imports client_golang in 2.4 ms) — `leasectl run` and
// its watchdog included, against a budget of 2.5x `flock -n` (about 2 ms).
// Six metrics do not need it; the tests check the output with the client's
// own parser. A nil *Metrics records nothing.
type Metrics struct {
	mu          sync.Mutex
	recovered   uint64
	runs        uint64
	failures    uint64
	quarantined int
	inflight    int
	stale       histogram
	// The jobs' series and what goes with them (jobmetrics.go).
	overdueJobs int
	lastPass    time.Time
	jobs        map[string]*jobSeries
	truncated   bool
}

// staleBuckets span a scan right after the liveness expired (sub-second
// TTLs) to evidence about to expire (the default evidence TTL is an hour).
var staleBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// histogram is a cumulative Prometheus histogram over staleBuckets.
type histogram struct {
	counts []uint64 // counts[i]: observations <= staleBuckets[i]
	count  uint64
	sum    float64
}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(staleBuckets))
	}
	for i, le := range staleBuckets {
		if v <= le {
			h.counts[i]++
		}
	}
	h.count++
	h.sum += v
}

// NewMetrics returns the reaper's metrics, all zero.
func NewMetrics() *Metrics { return &Metrics{} }

func (m *Metrics) observeRun() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs++
}

func (m *Metrics) observeCrashes(crashes []leasestore.Crash) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range crashes {
		m.recovered++
		m.stale.observe(staleFor(&crashes[i], crashes[i].DetectedAt).Seconds())
	}
}

func (m *Metrics) observeFailure() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures++
}

func (m *Metrics) observeCounts(c leasestore.Counts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inflight, m.quarantined = c.InFlight, c.Quarantined
}

// WriteText writes the metrics in the Prometheus text exposition format.
func (m *Metrics) WriteText(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &strings.Builder{}
	family(b, "leasectl_recovered_crashes_total", "counter", "Crashed runs (evidence without liveness) this reaper found and counted.")
	sample(b, "leasectl_recovered_crashes_total", "", float64(m.recovered))
	family(b, "leasectl_stale_duration_seconds", "histogram", "How long a crashed run had been without liveness when the reaper found it.")
	for i, le := range staleBuckets {
		var n uint64
		if m.stale.counts != nil {
			n = m.stale.counts[i]
		}
		sample(b, "leasectl_stale_duration_seconds_bucket", `le="`+strconv.FormatFloat(le, 'g', -1, 64)+`"`, float64(n))
	}
	sample(b, "leasectl_stale_duration_seconds_bucket", `le="+Inf"`, float64(m.stale.count))
	sample(b, "leasectl_stale_duration_seconds_sum", "", m.stale.sum)
	sample(b, "leasectl_stale_duration_seconds_count", "", float64(m.stale.count))
	family(b, "leasectl_reaper_runs_total", "counter", "Scan passes this reaper ran, failed ones included.")
	sample(b, "leasectl_reaper_runs_total", "", float64(m.runs))
	family(b, "leasectl_reaper_errors_total", "counter", "Scan passes that failed, most often because the store was unreachable.")
	sample(b, "leasectl_reaper_errors_total", "", float64(m.failures))
	family(b, "leasectl_quarantined_jobs", "gauge", "Jobs in quarantine in the store, as of the last successful pass.")
	sample(b, "leasectl_quarantined_jobs", "", float64(m.quarantined))
	family(b, "leasectl_inflight_jobs", "gauge", "Live leases in the store, as of the last successful pass.")
	sample(b, "leasectl_inflight_jobs", "", float64(m.inflight))
	m.writeJobs(b)
	_, err := io.WriteString(w, b.String())
	return err
}

func family(b *strings.Builder, name, kind, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
}

func sample(b *strings.Builder, name, labels string, v float64) {
	if labels != "" {
		name += "{" + labels + "}"
	}
	fmt.Fprintf(b, "%s %s\n", name, strconv.FormatFloat(v, 'g', -1, 64))
}

// textContentType is the media type of the text exposition format.
const textContentType = "text/plain; version=0.0.4; charset=utf-8"

// shutdownTimeout bounds how long a stopping reaper waits for a scrape in
// progress: long enough for one scrape of six metrics, short enough that
// SIGTERM ends the process promptly.
const shutdownTimeout = 2 * time.Second

// Serve serves the metrics at /metrics on ln until ctx is done, then shuts
// the server down and returns nil. It returns the server's error if it
// stops by itself.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", textContentType)
		_ = m.WriteText(w)
	})
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
