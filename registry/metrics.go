package registry

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// latencyBuckets span a request the store answers over loopback (a tenth
// of a millisecond) to one that times out or a long-poll (seconds).
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// metrics are the registry's own Prometheus metrics, written by hand in the
// text exposition format as inspect.Metrics are (for the same reason: the
// official client's package init would cost every leasectl process).
type metrics struct {
	mu       sync.Mutex
	requests map[routeStatus]uint64
	latency  map[string]*latency
	inflight int
}

type routeStatus struct {
	route  string
	status int
}

type latency struct {
	counts []uint64 // counts[i]: observations <= latencyBuckets[i]
	count  uint64
	sum    float64
}

func newMetrics() *metrics {
	return &metrics{requests: map[routeStatus]uint64{}, latency: map[string]*latency{}}
}

func (m *metrics) begin() {
	m.mu.Lock()
	m.inflight++
	m.mu.Unlock()
}

// end records a request to route answered with status after d.
func (m *metrics) end(route string, status int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inflight--
	m.requests[routeStatus{route, status}]++
	l := m.latency[route]
	if l == nil {
		l = &latency{counts: make([]uint64, len(latencyBuckets))}
		m.latency[route] = l
	}
	s := d.Seconds()
	for i, le := range latencyBuckets {
		if s <= le {
			l.counts[i]++
		}
	}
	l.count++
	l.sum += s
}

// writeText writes the metrics, with the counts of subscriptions and token
// watches the registry holds.
func (m *metrics) writeText(w io.Writer, subscriptions, tokenWatches int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := &strings.Builder{}
	header := func(name, kind, help string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

	header("leasectl_registry_requests_total", "counter", "Requests the registry answered, by route and HTTP status.")
	keys := make([]routeStatus, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b routeStatus) int {
		if c := strings.Compare(a.route, b.route); c != 0 {
			return c
		}
		return a.status - b.status
	})
	for _, k := range keys {
		fmt.Fprintf(b, "leasectl_registry_requests_total{route=%q,code=\"%d\"} %d\n", k.route, k.status, m.requests[k])
	}

	header("leasectl_registry_request_duration_seconds", "histogram", "Time from a request's arrival to its answer, by route; long-polls included.")
	routes := make([]string, 0, len(m.latency))
	for r := range m.latency {
		routes = append(routes, r)
	}
	slices.Sort(routes)
	for _, r := range routes {
		l := m.latency[r]
		for i, le := range latencyBuckets {
			fmt.Fprintf(b, "leasectl_registry_request_duration_seconds_bucket{route=%q,le=%q} %d\n", r, num(le), l.counts[i])
		}
		fmt.Fprintf(b, "leasectl_registry_request_duration_seconds_bucket{route=%q,le=\"+Inf\"} %d\n", r, l.count)
		fmt.Fprintf(b, "leasectl_registry_request_duration_seconds_sum{route=%q} %s\n", r, num(l.sum))
		fmt.Fprintf(b, "leasectl_registry_request_duration_seconds_count{route=%q} %d\n", r, l.count)
	}

	header("leasectl_registry_inflight_requests", "gauge", "Requests being answered now, long-polls included.")
	fmt.Fprintf(b, "leasectl_registry_inflight_requests %d\n", m.inflight)
	header("leasectl_registry_subscriptions", "gauge", "Subscriptions to job releases the registry holds for waiting clients.")
	fmt.Fprintf(b, "leasectl_registry_subscriptions %d\n", subscriptions)
	header("leasectl_registry_token_watches", "gauge", "Watches of jobs' fencing tokens the registry holds for downstream checkers.")
	fmt.Fprintf(b, "leasectl_registry_token_watches %d\n", tokenWatches)
	_, err := io.WriteString(w, b.String())
	return err
}
