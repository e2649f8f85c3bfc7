package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

func TestNewCmdScan(t *testing.T) {
	for _, tc := range []struct {
		argv     []string
		wantCode int
		want     ScanOptions
	}{
		{argv: nil, want: ScanOptions{Interval: 10 * time.Second}},
		{argv: []string{"--json"}, want: ScanOptions{Interval: 10 * time.Second, JSON: true}},
		{argv: []string{"--watch"}, want: ScanOptions{Watch: true, Interval: 10 * time.Second}},
		{
			argv: []string{"--watch", "--interval", "200ms", "--metrics-addr", "127.0.0.1:9465"},
			want: ScanOptions{Watch: true, Interval: 200 * time.Millisecond, MetricsAddr: "127.0.0.1:9465"},
		},
		{argv: []string{"--watch", "--metrics-addr", ":9465"}, want: ScanOptions{Watch: true, Interval: 10 * time.Second, MetricsAddr: ":9465"}},
		{argv: []string{"--interval", "5s"}, wantCode: exitUsage},
		{argv: []string{"--metrics-addr", "127.0.0.1:9465"}, wantCode: exitUsage},
		{argv: []string{"--watch", "--interval", "0s"}, wantCode: exitUsage},
		{argv: []string{"--watch", "--interval", "-1s"}, wantCode: exitUsage},
		{argv: []string{"--watch", "--interval", "often"}, wantCode: exitUsage},
		{argv: []string{"--watch", "--metrics-addr", "9465"}, wantCode: exitUsage},
		{argv: []string{"now"}, wantCode: exitUsage},
	} {
		var got *ScanOptions
		code := executeArgs(NewCmdScan(testFactory(), func(o *ScanOptions) error { got = o; return nil }), tc.argv...)
		if code != tc.wantCode {
			t.Errorf("scan %q: exit %d, want %d", tc.argv, code, tc.wantCode)
			continue
		}
		if code == 0 && (got.Watch != tc.want.Watch || got.Interval != tc.want.Interval || got.MetricsAddr != tc.want.MetricsAddr || got.JSON != tc.want.JSON) {
			t.Errorf("scan %q: options %+v, want %+v", tc.argv, got, tc.want)
		}
	}
}

func TestScanOutput(t *testing.T) {
	for _, m := range outputModes {
		for _, tc := range []struct {
			name  string
			store *stubStore
		}{
			{"scan", sampleStore()},
			{"scan_empty", &stubStore{}},
		} {
			ios, out, errOut := testStreams(m.tty)
			if err := scanRun(context.Background(), &ScanOptions{IO: ios, Now: fixedNow, OpenStore: opener(tc.store), JSON: m.json}); err != nil {
				t.Fatalf("%s (%s): %v", tc.name, m.name, err)
			}
			if !tc.store.closed {
				t.Errorf("%s left the store open", tc.name)
			}
			assertGolden(t, tc.name+"_"+m.name, out.String(), errOut.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe to write from the command's goroutine
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// countingStore counts scan passes on a channel.
type countingStore struct {
	*stubStore
	passes chan struct{}
}

func (s countingStore) Scan(ctx context.Context) ([]leasestore.Crash, error) {
	select {
	case s.passes <- struct{}{}:
	default:
	}
	return s.stubStore.Scan(ctx)
}

func TestScanWatchStreamsJSONLinesAndServesMetrics(t *testing.T) {
	var out, logs syncBuffer
	ios := &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &logs}
	store := countingStore{stubStore: sampleStore(), passes: make(chan struct{}, 1)}
	store.overdue = []leasestore.Overdue{{Job: "nightly-report", Expect: leasestore.Expectation{Every: 24 * time.Hour, Grace: time.Hour},
		LastSuccess: oncallNow.Add(-26 * time.Hour), Due: oncallNow.Add(-time.Hour), Now: oncallNow}}
	opts := &ScanOptions{
		IO: ios, Now: fixedNow, OpenStore: opener(store),
		Logger: func() (zerolog.Logger, error) { return zerolog.New(&logs), nil },
		Watch:  true, Interval: 20 * time.Millisecond, MetricsAddr: "127.0.0.1:0", JSON: true,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- scanRun(ctx, opts) }()

	for range 3 { // the pass at once, then two ticks
		select {
		case <-store.passes:
		case <-time.After(10 * time.Second):
			t.Fatal("timed out waiting for scan passes")
		}
	}
	// The address is logged before the first pass.
	m := regexp.MustCompile(`"addr":"([^"]+)"`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", logs.String())
	}
	url := "http://" + m[1] + "/metrics"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The stub finds the same two crashes on every pass.
	if !regexp.MustCompile(`(?m)^leasectl_recovered_crashes_total ([2-9]|\d\d+)$`).Match(body) {
		t.Errorf("metrics lack the recovered crashes:\n%s", body)
	}
	if !regexp.MustCompile(`(?m)^leasectl_inflight_jobs 2$`).Match(body) {
		t.Errorf("metrics lack the in-flight gauge from Counts:\n%s", body)
	}
	for _, want := range []string{`(?m)^leasectl_overdue_jobs 1$`, `(?m)^leasectl_job_overdue\{job_id="nightly-report"\} 1$`,
		`(?m)^leasectl_job_quarantined\{job_id="billing-sync"\} 1$`} {
		if !regexp.MustCompile(want).Match(body) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	// Overdue on every pass, said once.
	if n := strings.Count(logs.String(), "job nightly-report is overdue"); n != 1 {
		t.Errorf("the overdue job was logged %d times over three passes, want once:\n%s", n, logs.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("scan --watch returned %v when stopped, want nil (exit 0)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("scan --watch did not stop")
	}
	if !store.closed {
		t.Error("scan --watch left the store open")
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the metrics server still answers after scan --watch stopped")
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 4 || len(lines)%2 != 0 {
		t.Fatalf("got %d JSON lines, want two per pass:\n%s", len(lines), out.String())
	}
	for _, line := range lines {
		var c struct {
			Job     string `json:"job"`
			Crashes int    `json:"crashes"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil || c.Job == "" {
			t.Fatalf("line %q is not a crash object: %v", line, err)
		}
	}
}
