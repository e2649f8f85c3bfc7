package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/leasectl/leasectl/leasestore"
)

func TestShortDurationAndRelative(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0ms"},
		{850 * time.Millisecond, "850ms"},
		{12*time.Second + 900*time.Millisecond, "12s"},
		{3 * time.Minute, "3m"},
		{3*time.Minute + 12*time.Second, "3m12s"},
		{2*time.Hour + 5*time.Minute + 59*time.Second, "2h5m"},
		{76 * time.Hour, "3d4h"},
	} {
		if got := shortDuration(tc.d); got != tc.want {
			t.Errorf("shortDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	for _, tc := range []struct {
		offset time.Duration
		want   string
	}{
		{-3 * time.Minute, "3m ago"},
		{12 * time.Second, "in 12s"},
		{300 * time.Millisecond, "now"},
	} {
		if got := relative(t0.Add(tc.offset), t0); got != tc.want {
			t.Errorf("relative(now%+v) = %q, want %q", tc.offset, got, tc.want)
		}
	}
}

func sampleCrash() leasestore.Crash {
	return leasestore.Crash{
		Job: "nightly", Holder: "host-a:4242:x1", Host: "host-a", PID: 4242, Token: 7,
		StartedAt:  t0.Add(-5 * time.Minute),
		StaleSince: t0.Add(-42*time.Second - 500*time.Millisecond),
		DetectedAt: t0, Crashes: 2,
	}
}

func TestCrashJSONSchema(t *testing.T) {
	var out bytes.Buffer
	p := &Printer{Out: &out, Format: FormatJSON, Now: t0}
	if err := p.Crashes([]leasestore.Crash{sampleCrash()}); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, out.String())
	}
	wantKeys := []string{"command", "crashes", "detected_at", "host", "job", "pid", "quarantined", "stale_for_ms", "stale_since", "started_at", "token", "worker"}
	if keys := sortedKeys(got[0]); !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("crash keys = %v, want %v", keys, wantKeys)
	}
	for key, want := range map[string]any{
		"started_at":   "2026-03-01T01:55:00.000Z",
		"stale_since":  "2026-03-01T01:59:17.500Z",
		"stale_for_ms": 42500.0,
		"command":      []any{}, // never null
		"quarantined":  false,
	} {
		if !reflect.DeepEqual(got[0][key], want) {
			t.Errorf("%s = %#v, want %#v", key, got[0][key], want)
		}
	}
}

func TestStatusJSONUnknownValuesAreNull(t *testing.T) {
	var out bytes.Buffer
	p := &Printer{Out: &out, Format: FormatJSON}
	if err := p.Status(&leasestore.JobStatus{Job: "never-seen", State: leasestore.StateIdle, Now: t0.In(time.FixedZone("CET", 3600))}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"holder", "crashed", "quarantine", "last_outcome", "last_success"} {
		v, ok := got[key]
		if !ok || v != nil {
			t.Errorf("%s = %#v (present %v), want null: keys are always present", key, v, ok)
		}
	}
	if got["now"] != "2026-03-01T02:00:00.000Z" {
		t.Errorf("now = %v, want UTC RFC 3339", got["now"])
	}
	if h, ok := got["history"].([]any); !ok || len(h) != 0 {
		t.Errorf("history = %#v, want []", got["history"])
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestPipedIsTabSeparatedWithoutHeader(t *testing.T) {
	var out bytes.Buffer
	c := sampleCrash()
	c.Holder = "evil\tworker\nname"
	p := &Printer{Out: &out, Format: FormatPlain, Now: t0}
	if err := p.Crashes([]leasestore.Crash{c}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("piped output has %d lines, want 1 (no header): %q", len(lines), out.String())
	}
	want := []string{"nightly", "evil worker name", "host-a", "4242", "2026-03-01T01:55:00.000Z", "42.5s", "2", "false"}
	if fields := strings.Split(lines[0], "\t"); !reflect.DeepEqual(fields, want) {
		t.Fatalf("fields = %q, want %q", fields, want)
	}
}

func TestEmptyResult(t *testing.T) {
	for _, tc := range []struct {
		format        Format
		stdout, stder string
	}{
		{FormatTable, "no leases held\n", ""},
		{FormatPlain, "", "no leases held\n"},
		{FormatJSON, "[]\n", ""},
	} {
		var out, errOut bytes.Buffer
		p := &Printer{Out: &out, ErrOut: &errOut, Format: tc.format, Now: t0}
		if err := p.Leases(nil, nil); err != nil {
			t.Fatal(err)
		}
		if out.String() != tc.stdout || errOut.String() != tc.stder {
			t.Errorf("format %d: stdout %q, stderr %q; want %q, %q", tc.format, out.String(), errOut.String(), tc.stdout, tc.stder)
		}
	}
}

func TestFormatFor(t *testing.T) {
	if FormatFor(true, true) != FormatJSON || FormatFor(true, false) != FormatTable || FormatFor(false, false) != FormatPlain {
		t.Fatal("FormatFor: --json wins, then a terminal gets a table, a pipe plain lines")
	}
}

func TestOperator(t *testing.T) {
	for _, tc := range []struct{ user, host, want string }{
		{"alice", "ops-1", "alice@ops-1"},
		{"alice", "", "alice"},
		{"", "ops-1", "unknown"},
	} {
		if got := Operator(tc.user, tc.host); got != tc.want {
			t.Errorf("Operator(%q, %q) = %q, want %q", tc.user, tc.host, got, tc.want)
		}
	}
}

func TestCheckToken(t *testing.T) {
	s := newFakeStore(t0)
	old := acquire(t, s, "j", "w1", time.Second, 3)
	s.advance(2 * time.Second)
	cur := acquire(t, s, "j", "w2", time.Minute, 3)
	ctx := context.Background()

	got, err := CheckToken(ctx, leasestore.New(s), "j", cur.Token)
	if err != nil || !got.Valid || got.Reason != "" {
		t.Fatalf("current token: %+v, %v; want valid", got, err)
	}
	got, err = CheckToken(ctx, leasestore.New(s), "j", old.Token)
	if err != nil || got.Valid || got.Current != cur.Token || !got.Live || got.Reason == "" {
		t.Fatalf("previous token: %+v, %v; want stale, with the current token and a reason", got, err)
	}
	s.fail = &leasestore.UnavailableError{Op: "check", Err: errors.New("connection refused")}
	if _, err := CheckToken(ctx, leasestore.New(s), "j", cur.Token); !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("unreachable store: %v, want an error, not a verdict", err)
	}
}

func TestLeaseAgesFollowTheStoresClock(t *testing.T) {
	// The store's clock runs an hour behind the local one: ages come from
	// the store's reading, not from the local clock.
	storeNow := t0.Add(-time.Hour)
	h := leasestore.Holder{Job: "j", Worker: "w", Host: "h", Token: 7,
		StartedAt: storeNow.Add(-90 * time.Second), ExpiresAt: storeNow.Add(20 * time.Second), ReadAt: storeNow}
	var out bytes.Buffer
	p := &Printer{Out: &out, Format: FormatPlain, Now: t0}
	if err := p.Leases([]leasestore.Holder{h}, nil); err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\t")
	if len(fields) != 6 || fields[4] != "1m30s" || fields[5] != "20s" {
		t.Fatalf("fields = %q, want running for 1m30s and 20s left by the store's clock, and no round trip: not even an empty field", fields)
	}
}

func TestTruncateCountsColumnsNotBytes(t *testing.T) {
	for _, tc := range []struct {
		s     string
		width int
		want  string
	}{
		{"nightly", 7, "nightly"},
		{"nightly-report", 8, "nightly…"},
		{"café-crème", 6, "café-…"},
		{"日本語のジョブ", 7, "日本語…"}, // two columns each: 6 + the ellipsis
	} {
		if got := truncate(tc.s, tc.width); got != tc.want || lipgloss.Width(got) > tc.width {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.width, got, tc.want)
		}
	}
}

func TestFitColumnsCutsTheWidestTextColumnFirst(t *testing.T) {
	g := grid{
		headers: []string{"JOB", "WORKER", "TOKEN"},
		rows:    [][]cell{{textCell("nightly-report"), textCell("ip-10-0-12-34.eu-west-1.compute.internal:4242:a1b2"), tokenCell(1772331247000001)}},
	}
	g.text = textColumns(g.headers, "JOB", "WORKER")
	// Borders and padding take 3 columns per column plus 1: 10 here.
	for _, tc := range []struct {
		width int
		want  []int
	}{
		{0, []int{14, 50, 16}},
		{200, []int{14, 50, 16}},
		{60, []int{14, 20, 16}},
		{40, []int{7, 7, 16}}, // both text columns cut, alternately, the token never
		{10, []int{6, 6, 16}}, // too narrow: the text columns stop at minColumn
	} {
		if got := fitColumns(g, tc.width); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("fitColumns(width %d) = %v, want %v", tc.width, got, tc.want)
		}
	}
}
