package inspect

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/leasectl/leasectl/leasestore"
)

var t0 = time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)

func acquire(t *testing.T, s leasestore.Driver, job, worker string, ttl time.Duration, maxCrashes int) *leasestore.Lease {
	t.Helper()
	l, err := s.Acquire(context.Background(), leasestore.AcquireRequest{
		Job: job, Holder: worker, Host: "host-a", PID: 4242, Command: []string{"./report.sh"},
		TTL: ttl, EvidenceTTL: time.Hour, MaxCrashes: maxCrashes,
	})
	if err != nil {
		t.Fatalf("acquire %s: %v", job, err)
	}
	return l
}

// metricValue reads one metric of m: a counter's or gauge's value, or a
// histogram's sample count.
func metricValue(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	for _, f := range gather(t, m) {
		if f.GetName() != name {
			continue
		}
		pm := f.GetMetric()[0]
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return pm.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return pm.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			return float64(pm.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func newMetrics(t *testing.T) *Metrics {
	t.Helper()
	return NewMetrics()
}

func TestPassReportsEachCrashOnce(t *testing.T) {
	s := newFakeStore(t0)
	m := newMetrics(t)
	r := &Reaper{Store: leasestore.New(s), Metrics: m}
	acquire(t, s, "crashy", "w1", 10*time.Second, 3)
	acquire(t, s, "healthy", "w2", time.Minute, 3)
	s.advance(15 * time.Second) // crashy's liveness expired 5s ago; healthy's is live

	crashes, err := r.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(crashes) != 1 || crashes[0].Job != "crashy" || crashes[0].Holder != "w1" || crashes[0].Crashes != 1 {
		t.Fatalf("first pass found %+v, want crashy's one crash by w1", crashes)
	}
	again, err := r.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Fatalf("second pass found %+v again, want nothing: a crash is counted once", again)
	}

	for name, want := range map[string]float64{
		"leasectl_recovered_crashes_total": 1,
		"leasectl_reaper_runs_total":       2,
		"leasectl_reaper_errors_total":     0,
		"leasectl_stale_duration_seconds":  1, // one observation
		"leasectl_inflight_jobs":           1,
		"leasectl_quarantined_jobs":        0,
	} {
		if got := metricValue(t, m, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func TestPassObservesStaleDuration(t *testing.T) {
	s := newFakeStore(t0)
	m := newMetrics(t)
	acquire(t, s, "j", "w1", 10*time.Second, 3)
	s.advance(10*time.Second + 42*time.Second)
	if _, err := (&Reaper{Store: leasestore.New(s), Metrics: m}).Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, f := range gather(t, m) {
		if f.GetName() == "leasectl_stale_duration_seconds" {
			if sum := f.GetMetric()[0].GetHistogram().GetSampleSum(); sum != 42 {
				t.Fatalf("stale duration sum = %v s, want 42 (found 42s after its liveness expired)", sum)
			}
			return
		}
	}
	t.Fatal("leasectl_stale_duration_seconds not gathered")
}

func TestPassQuarantinesAtTheRunsThreshold(t *testing.T) {
	s := newFakeStore(t0)
	m := newMetrics(t)
	r := &Reaper{Store: leasestore.New(s), Metrics: m}
	for i := 1; i <= 2; i++ {
		acquire(t, s, "poison", fmt.Sprintf("w%d", i), time.Second, 2)
		s.advance(2 * time.Second)
		crashes, err := r.Pass(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(crashes) != 1 || crashes[0].Crashes != i || crashes[0].Quarantined != (i == 2) {
			t.Fatalf("pass %d found %+v, want crash %d, quarantined only at 2", i, crashes, i)
		}
	}
	if got := metricValue(t, m, "leasectl_quarantined_jobs"); got != 1 {
		t.Fatalf("leasectl_quarantined_jobs = %v, want 1", got)
	}
}

func TestPassStoreFailure(t *testing.T) {
	s := newFakeStore(t0)
	s.fail = &leasestore.UnavailableError{Op: "scan", Err: errors.New("connection refused")}
	m := newMetrics(t)
	_, err := (&Reaper{Store: leasestore.New(s), Metrics: m}).Pass(context.Background())
	if !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("Pass error = %v, want one matching ErrUnavailable", err)
	}
	if got := metricValue(t, m, "leasectl_reaper_errors_total"); got != 1 {
		t.Errorf("errors_total = %v, want 1", got)
	}
	if got := metricValue(t, m, "leasectl_reaper_runs_total"); got != 1 {
		t.Errorf("runs_total = %v, want 1 (failed passes count)", got)
	}
}

func TestPassWithoutMetricsSkipsCounts(t *testing.T) {
	s := newFakeStore(t0)
	acquire(t, s, "j", "w1", time.Second, 3)
	s.advance(2 * time.Second)
	crashes, err := (&Reaper{Store: leasestore.New(s)}).Pass(context.Background())
	if err != nil || len(crashes) != 1 {
		t.Fatalf("Pass = %v, %v; want one crash", crashes, err)
	}
}

// countsFailing fails only Counts, after Scan consumed the crashes.
type countsFailing struct{ *fakeStore }

func (countsFailing) Counts(context.Context) (leasestore.Counts, error) {
	return leasestore.Counts{}, &leasestore.UnavailableError{Op: "counts", Err: errors.New("timeout")}
}

func TestPassReturnsConsumedCrashesWhenCountsFail(t *testing.T) {
	s := newFakeStore(t0)
	acquire(t, s, "j", "w1", time.Second, 3)
	s.advance(2 * time.Second)
	crashes, err := (&Reaper{Store: leasestore.New(countsFailing{s}), Metrics: newMetrics(t)}).Pass(context.Background())
	if err == nil {
		t.Fatal("Pass hid the Counts failure")
	}
	if len(crashes) != 1 {
		t.Fatalf("Pass returned %d crashes, want the 1 it consumed: it would never be found again", len(crashes))
	}
}

func TestWatchPassesAtOnceAndOnEveryTick(t *testing.T) {
	s := newFakeStore(t0)
	ticks := make(chan time.Time)
	found := make(chan []leasestore.Crash)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	acquire(t, s, "first", "w1", time.Second, 3)
	s.advance(2 * time.Second)
	go func() {
		done <- (&Reaper{Store: leasestore.New(s)}).Watch(ctx, ticks,
			func(c []leasestore.Crash) error { found <- c; return nil },
			func(err error) { t.Errorf("unexpected pass failure: %v", err) })
	}()

	if c := receive(t, found); c[0].Job != "first" {
		t.Fatalf("first pass found %+v, want job first", c)
	}
	acquire(t, s, "second", "w2", time.Second, 3)
	s.advance(2 * time.Second)
	ticks <- t0
	if c := receive(t, found); len(c) != 1 || c[0].Job != "second" {
		t.Fatalf("pass after a tick found %+v, want only job second", c)
	}
	ticks <- t0 // a pass that finds nothing does not call found
	cancel()
	if err := receive(t, done); err != nil {
		t.Fatalf("Watch returned %v after cancel, want nil", err)
	}
	if s.scans != 3 {
		t.Fatalf("Watch ran %d passes, want 3 (one at once, one per tick)", s.scans)
	}
}

func TestWatchGoesOnAfterFailedPasses(t *testing.T) {
	s := newFakeStore(t0)
	s.fail = &leasestore.UnavailableError{Op: "scan", Err: errors.New("connection refused")}
	ticks := make(chan time.Time)
	failed := make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- (&Reaper{Store: leasestore.New(s)}).Watch(ctx, ticks,
			func([]leasestore.Crash) error { return nil },
			func(err error) { failed <- err })
	}()
	if err := receive(t, failed); !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("failed got %v, want the store's unavailability", err)
	}
	ticks <- t0
	receive(t, failed)
	cancel()
	if err := receive(t, done); err != nil {
		t.Fatalf("Watch returned %v, want nil: failed passes do not stop the reaper", err)
	}
}

func TestWatchStopsWhenOutputBreaks(t *testing.T) {
	s := newFakeStore(t0)
	acquire(t, s, "j", "w1", time.Second, 3)
	s.advance(2 * time.Second)
	broken := errors.New("write |1: broken pipe")
	err := (&Reaper{Store: leasestore.New(s)}).Watch(context.Background(), make(chan time.Time),
		func([]leasestore.Crash) error { return broken }, func(error) {})
	if !errors.Is(err, broken) {
		t.Fatalf("Watch returned %v, want the output's error", err)
	}
}

func TestWatchPassTimeout(t *testing.T) {
	ticks := make(chan time.Time)
	failed := make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = (&Reaper{Store: leasestore.New(frozenStore{newFakeStore(t0)}), PassTimeout: 50 * time.Millisecond}).Watch(ctx, ticks,
			func([]leasestore.Crash) error { return nil }, func(err error) { failed <- err })
	}()
	if err := receive(t, failed); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a frozen store's pass failed with %v, want its deadline", err)
	}
}

// frozenStore's Scan answers only when ctx ends, like a SIGSTOPped server.
type frozenStore struct{ *fakeStore }

func (frozenStore) Scan(ctx context.Context) ([]leasestore.Crash, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// receive waits for one value, failing the test after a generous hang
// guard.
func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting")
	}
	var zero T
	return zero
}
