package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

var alice = leasestore.Note{By: "alice", Reason: "nightly"}

// expect sets job's expectation on s, failing the test if it cannot.
func expect(t *testing.T, s leasestore.Driver, job string, every, grace time.Duration) {
	t.Helper()
	if err := s.Expect(context.Background(), job, &leasestore.Expectation{Every: every, Grace: grace}, alice); err != nil {
		t.Fatal(err)
	}
}

// complete runs job once to a success on s.
func complete(t *testing.T, s leasestore.Driver, job string) {
	t.Helper()
	l := acquire(t, s, job, "w-"+job, time.Minute, 3)
	if err := s.Release(context.Background(), l, leasestore.Outcome{Result: leasestore.ResultCompleted, Duration: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
}

// A watching reaper says that a job became overdue, as the store's clock
// passes its last success plus every plus grace, and that it is back in
// time after a success.
func TestWatchReportsOverdueChanges(t *testing.T) {
	s := newFakeStore(t0)
	expect(t, s, "nightly", time.Hour, 10*time.Minute)
	s.advance(70*time.Minute + time.Second)
	ticks := make(chan time.Time)
	changes := make(chan OverdueChange)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	r := &Reaper{Store: leasestore.New(s), OnOverdue: func(c OverdueChange) error { changes <- c; return nil }}
	go func() {
		done <- r.Watch(ctx, ticks, func([]leasestore.Crash) error { return nil },
			func(err error) { t.Errorf("unexpected pass failure: %v", err) })
	}()
	c := receive(t, changes)
	if len(c.Late) != 1 || c.Late[0].Job != "nightly" || len(c.BackInTime) != 0 {
		t.Fatalf("change %+v, want nightly late", c)
	}
	if o := c.Late[0]; o.Silence() != 70*time.Minute+time.Second || !o.LastSuccess.IsZero() {
		t.Errorf("overdue %+v: silent for %s, want 1h10m1s since the expectation was set, never succeeded", o, o.Silence())
	}
	// The pass is over once the change is received: nothing else runs.
	complete(t, s, "nightly")
	ticks <- t0
	if c := receive(t, changes); len(c.Late) != 0 || fmt.Sprint(c.BackInTime) != "[nightly]" {
		t.Fatalf("change after a success %+v, want nightly back in time", c)
	}
	cancel()
	if err := receive(t, done); err != nil {
		t.Fatal(err)
	}
}

// Changed says each change once: a job still overdue is not late again.
func TestOverdueChangedOnce(t *testing.T) {
	var r Reaper
	a, b := leasestore.Overdue{Job: "a"}, leasestore.Overdue{Job: "b"}
	for _, step := range []struct {
		list       []leasestore.Overdue
		late, back string
	}{
		{[]leasestore.Overdue{a}, "[a]", "[]"},
		{[]leasestore.Overdue{a}, "[]", "[]"},
		{[]leasestore.Overdue{a, b}, "[b]", "[]"},
		{[]leasestore.Overdue{b}, "[]", "[a]"},
		{nil, "[]", "[b]"},
	} {
		c := r.Changed(step.list)
		var late []string
		for _, o := range c.Late {
			late = append(late, o.Job)
		}
		if fmt.Sprint(late) != step.late || fmt.Sprint(c.BackInTime) != step.back {
			t.Errorf("after %v: late %v, back in time %v; want %s and %s", step.list, late, c.BackInTime, step.late, step.back)
		}
	}
}

// The metrics carry each job's last success, last run, expectation,
// overdue flag, crashes, quarantine and lease-lost count, labelled by
// job_id, and parse with the Prometheus parser.
func TestMetricsPerJob(t *testing.T) {
	s := newFakeStore(t0)
	expect(t, s, "nightly", time.Hour, 10*time.Minute)
	complete(t, s, "hourly")
	expect(t, s, "hourly", time.Hour, 0)
	acquire(t, s, "poison", "w1", time.Second, 2)
	s.advance(2 * time.Second)
	if err := s.Quarantine(context.Background(), "poison", alice); err != nil {
		t.Fatal(err)
	}
	s.event(s.job("hourly"), leasestore.EventLeaseLost, "w-old", 1, "renewal came after the lease expired")
	s.advance(2 * time.Hour)
	passAt := time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC)
	m := NewMetrics()
	r := &Reaper{Store: leasestore.New(s), Metrics: m, Now: func() time.Time { return passAt }}
	if _, err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := series(t, m)
	want := map[string]float64{
		`leasectl_overdue_jobs`:                                            2,
		`leasectl_job_series_truncated`:                                    0,
		`leasectl_reaper_last_success_timestamp_seconds`:                   float64(passAt.Unix()),
		`leasectl_job_overdue{job_id="nightly"}`:                           1,
		`leasectl_job_overdue{job_id="hourly"}`:                            1,
		`leasectl_job_expected_interval_seconds{job_id="nightly"}`:         4200,
		`leasectl_job_last_success_timestamp_seconds{job_id="hourly"}`:     float64(t0.Unix()),
		`leasectl_job_last_run_duration_seconds{job_id="hourly"}`:          1.5,
		`leasectl_job_last_run_result{job_id="hourly",result="completed"}`: 1,
		`leasectl_job_last_run_result{job_id="hourly",result="failed"}`:    0,
		`leasectl_job_consecutive_crashes{job_id="poison"}`:                1,
		`leasectl_job_quarantined{job_id="poison"}`:                        1,
		`leasectl_job_quarantined{job_id="nightly"}`:                       0,
		`leasectl_job_lease_lost_total{job_id="hourly"}`:                   1,
		`leasectl_job_lease_lost_total{job_id="nightly"}`:                  0,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (there: %v), want %v", name, g, ok, v)
		}
	}
	for _, absent := range []string{`leasectl_job_overdue{job_id="poison"}`, `leasectl_job_last_success_timestamp_seconds{job_id="nightly"}`} {
		if _, ok := got[absent]; ok {
			t.Errorf("%s is there: a job without an expectation, or that never succeeded, has none", absent)
		}
	}

	// A pass within JobSeriesEvery of the refresh reads no job's status;
	// the next refresh counts only the lease losts it had not seen.
	s.event(s.job("hourly"), leasestore.EventLeaseLost, "w-new", 2, "renewal came after the lease expired")
	s.advance(time.Second)
	passAt = passAt.Add(JobSeriesEvery - time.Second)
	if _, err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := series(t, m)[`leasectl_job_lease_lost_total{job_id="hourly"}`]; v != 1 {
		t.Errorf("lease lost after a pass within a minute: %v, want 1 (not refreshed yet)", v)
	}
	passAt = passAt.Add(time.Second)
	if _, err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := series(t, m)[`leasectl_job_lease_lost_total{job_id="hourly"}`]; v != 2 {
		t.Errorf("lease lost after a second event: %v, want 2", v)
	}
}

// With more jobs than JobSeriesLimit, the overdue ones keep their series,
// the series are bounded, and the metrics say that some jobs have none.
func TestMetricsPerJobAreBounded(t *testing.T) {
	s := newFakeStore(t0)
	for i := range JobSeriesLimit + 5 {
		s.job(fmt.Sprintf("job-%05d", i))
	}
	expect(t, s, "zz-last-by-id", time.Minute, 0)
	s.advance(2 * time.Minute)
	m := NewMetrics()
	if _, err := (&Reaper{Store: leasestore.New(s), Metrics: m}).Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := series(t, m)
	n := 0
	for name := range got {
		if strings.HasPrefix(name, "leasectl_job_quarantined{") {
			n++
		}
	}
	if n != JobSeriesLimit || got[`leasectl_job_overdue{job_id="zz-last-by-id"}`] != 1 || got["leasectl_job_series_truncated"] != 1 {
		t.Errorf("%d jobs with series, overdue job's %v, truncated %v; want %d, 1, 1", n,
			got[`leasectl_job_overdue{job_id="zz-last-by-id"}`], got["leasectl_job_series_truncated"], JobSeriesLimit)
	}
}

// series parses m with the Prometheus parser (gather) and returns every
// gauge and counter sample by name{labels}.
func series(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, f := range gather(t, m) {
		for _, pm := range f.GetMetric() {
			var labels []string
			for _, l := range pm.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := f.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case pm.Gauge != nil:
				out[name] = pm.GetGauge().GetValue()
			case pm.Counter != nil:
				out[name] = pm.GetCounter().GetValue()
			}
		}
	}
	return out
}

func TestPrintOverdue(t *testing.T) {
	list := []leasestore.Overdue{
		{Job: "nightly", Expect: leasestore.Expectation{Every: 24 * time.Hour, Grace: time.Hour, Since: t0},
			LastSuccess: t0, Due: t0.Add(25 * time.Hour), Now: t0.Add(27 * time.Hour)},
		{Job: "new", Expect: leasestore.Expectation{Every: time.Hour, Since: t0}, Due: t0.Add(time.Hour), Now: t0.Add(27 * time.Hour)},
	}
	var out bytes.Buffer
	if err := (&Printer{Out: &out, Format: FormatPlain}).Overdue(list); err != nil {
		t.Fatal(err)
	}
	want := "nightly\t2026-03-01T02:00:00.000Z\t27h0m0s\t24h0m0s\t1h0m0s\t2h0m0s\n" +
		"new\t\t27h0m0s\t1h0m0s\t0s\t26h0m0s\n"
	if out.String() != want {
		t.Errorf("piped:\n%q\nwant\n%q", out.String(), want)
	}
	out.Reset()
	if err := (&Printer{Out: &out, Format: FormatJSON}).Overdue(list[:1]); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if g := got[0]; g["job"] != "nightly" || g["silent_for_ms"] != float64(27*time.Hour/time.Millisecond) ||
		g["overdue_ms"] != float64(2*time.Hour/time.Millisecond) || g["last_success"] != "2026-03-01T02:00:00.000Z" {
		t.Errorf("JSON %v", g)
	}
	out.Reset()
	var errOut bytes.Buffer
	if err := (&Printer{Out: &out, ErrOut: &errOut, Format: FormatPlain}).Overdue(nil); err != nil || out.Len() != 0 ||
		!strings.Contains(errOut.String(), "no overdue jobs") {
		t.Errorf("empty: %v, stdout %q, stderr %q", err, out.String(), errOut.String())
	}
	if line := OverdueLine(list[0]); line != "job nightly is overdue: last succeeded 1d3h ago, expected every 1d (grace 1h)" {
		t.Errorf("log line %q", line)
	}
}

// ls marks the lease of an overdue job on a terminal and in JSON, leaves
// piped lines as they are, and counts the overdue jobs not running on
// stderr.
func TestLeasesMarkOverdue(t *testing.T) {
	h := leasestore.Holder{Job: "nightly", Worker: "w1", Host: "h", Token: 7, StartedAt: t0, ExpiresAt: t0.Add(time.Minute), ReadAt: t0}
	overdue := []leasestore.Overdue{{Job: "nightly"}, {Job: "gone"}, {Job: "gone-too"}}
	for _, tc := range []struct {
		format    Format
		out, note string
	}{
		{FormatTable, "nightly (overdue)", "2 job(s) overdue and not running"},
		{FormatJSON, `"overdue": true`, "2 job(s) overdue and not running"},
	} {
		var out, errOut bytes.Buffer
		if err := (&Printer{Out: &out, ErrOut: &errOut, Format: tc.format, Now: t0}).Leases([]leasestore.Holder{h}, overdue); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.out) || !strings.Contains(errOut.String(), tc.note) {
			t.Errorf("format %d: stdout %q, stderr %q; want %q and %q", tc.format, out.String(), errOut.String(), tc.out, tc.note)
		}
	}
	var out, errOut bytes.Buffer
	if err := (&Printer{Out: &out, ErrOut: &errOut, Format: FormatPlain, Now: t0}).Leases([]leasestore.Holder{h}, overdue[:1]); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "overdue") || errOut.Len() != 0 {
		t.Errorf("piped: stdout %q, stderr %q; want the lines as they were, no note", out.String(), errOut.String())
	}
}

// Exactly JobSeriesLimit jobs all have series: nothing is truncated.
func TestMetricsPerJobAtTheLimit(t *testing.T) {
	s := newFakeStore(t0)
	for i := range JobSeriesLimit {
		s.job(fmt.Sprintf("job-%05d", i))
	}
	m := NewMetrics()
	if _, err := (&Reaper{Store: leasestore.New(s), Metrics: m}).Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := series(t, m)
	if _, last := got[`leasectl_job_quarantined{job_id="job-00999"}`]; got["leasectl_job_series_truncated"] != 0 || !last {
		t.Errorf("truncated %v, the last job's series there %v; want 0 and true", got["leasectl_job_series_truncated"], last)
	}
}

// overdueless is a store that cannot list overdue jobs, as a registry
// older than expectations.
type overdueless struct{ *fakeStore }

func (overdueless) Overdue(context.Context) ([]leasestore.Overdue, error) {
	return nil, fmt.Errorf("registry is older than job expectations: %w", errors.ErrUnsupported)
}

// A watching reaper whose store cannot list overdue jobs says so once and
// goes on: its passes succeed, with the metrics and their per-job series.
func TestWatchGoesOnWithoutOverdueJobs(t *testing.T) {
	s := newFakeStore(t0)
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	said := make(chan error, 2)
	r := &Reaper{Store: leasestore.New(overdueless{s}), Metrics: NewMetrics(), Now: func() time.Time { return t0 },
		OnOverdue:   func(OverdueChange) error { return nil },
		Unsupported: func(err error) { said <- err }}
	go func() {
		done <- r.Watch(ctx, ticks, func([]leasestore.Crash) error { return nil },
			func(err error) { t.Errorf("unexpected pass failure: %v", err) })
	}()
	if err := receive(t, said); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Unsupported got %v", err)
	}
	ticks <- t0
	ticks <- t0 // the second pass is over once the third is asked for
	cancel()
	if err := receive(t, done); err != nil {
		t.Fatal(err)
	}
	if len(said) != 0 {
		t.Error("the reaper said more than once that it cannot list overdue jobs")
	}
	if n := metricValue(t, r.Metrics, "leasectl_reaper_errors_total"); n != 0 {
		t.Errorf("%v reaper errors counted, want none", n)
	}
	if at := metricValue(t, r.Metrics, "leasectl_reaper_last_success_timestamp_seconds"); at != float64(t0.Unix()) {
		t.Errorf("last successful pass at %v, want %v", at, t0.Unix())
	}
}
