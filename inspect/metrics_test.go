package inspect

import (
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasectl/leasectl/leasestore"
)

// gather renders m and parses it back with the Prometheus client's own
// parser, so the tests check that the hand-written exposition is valid.
func gather(t *testing.T, m *Metrics) []*dto.MetricFamily {
	t.Helper()
	var b strings.Builder
	if err := m.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, b.String())
	}
	families := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		if f.GetHelp() == "" {
			t.Errorf("metric %s has no HELP text", f.GetName())
		}
		families = append(families, f)
	}
	sort.Slice(families, func(i, j int) bool { return families[i].GetName() < families[j].GetName() })
	return families
}

func TestHistogramBucketsAreCumulative(t *testing.T) {
	m := NewMetrics()
	var h histogram
	for _, v := range []float64{0.05, 3, 7200} {
		h.observe(v)
	}
	m.stale = h
	for _, f := range gather(t, m) {
		if f.GetName() != "leasectl_stale_duration_seconds" {
			continue
		}
		hist := f.GetMetric()[0].GetHistogram()
		if hist.GetSampleCount() != 3 || hist.GetSampleSum() != 7203.05 {
			t.Fatalf("count %d sum %v, want 3 and 7203.05", hist.GetSampleCount(), hist.GetSampleSum())
		}
		want := map[float64]uint64{0.1: 1, 2.5: 1, 5: 2, 3600: 2}
		for _, b := range hist.GetBucket() {
			if n, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != n {
				t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), n)
			}
		}
		return
	}
	t.Fatal("no histogram")
}

func TestServeExposesTheReapersMetricsOnly(t *testing.T) {
	s := newFakeStore(t0)
	m := newMetrics(t)
	acquire(t, s, "j", "w1", time.Second, 3)
	s.advance(2 * time.Second)
	if _, err := (&Reaper{Store: leasestore.New(s), Metrics: m}).Pass(context.Background()); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	text := string(body)
	for _, want := range []string{
		"# HELP leasectl_recovered_crashes_total ",
		"# TYPE leasectl_recovered_crashes_total counter",
		"\nleasectl_recovered_crashes_total 1\n",
		"# TYPE leasectl_stale_duration_seconds histogram",
		"\nleasectl_stale_duration_seconds_count 1\n",
		"# TYPE leasectl_reaper_runs_total counter",
		"\nleasectl_reaper_runs_total 1\n",
		"# TYPE leasectl_quarantined_jobs gauge",
		"# TYPE leasectl_inflight_jobs gauge",
		"# HELP leasectl_inflight_jobs ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, unwanted := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("/metrics has %s: the reaper's registry must hold only its own metrics", unwanted)
		}
	}

	cancel()
	if err := receive(t, done); err != nil {
		t.Fatalf("Serve returned %v after cancel, want nil", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/metrics"); err == nil {
		t.Fatal("the metrics server still answers after Serve returned")
	}
}

func TestNewMetricsAreIndependent(t *testing.T) {
	a, b := newMetrics(t), newMetrics(t)
	a.observeRun()
	if got := metricValue(t, b, "leasectl_reaper_runs_total"); got != 0 {
		t.Fatalf("a second Metrics sees the first one's runs (%v): registries must not be shared", got)
	}
}
