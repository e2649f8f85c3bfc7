package packaging

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/leasectl/leasectl/inspect"
)

// The shipped alerting rules and dashboard (README, Alerting).
const (
	rulesFile     = "prometheus/leasectl.rules.yml"
	dashboardFile = "grafana/leasectl.json"
)

// metricName finds the leasectl metrics an expression names.
var metricName = regexp.MustCompile(`\bleasectl_[a-z_]+\b`)

// exported are the metric names the reaper's /metrics carries, histogram
// series (_bucket, _sum, _count) included, read from the exposition itself.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	var b strings.Builder
	if err := inspect.NewMetrics().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == "TYPE" {
			names[f[2]] = true
			if f[3] == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[f[2]+s] = true
				}
			}
		}
	}
	return names
}

// Every metric the rules and the dashboard name is one the reaper exports:
// a renamed metric would leave an alert that never fires.
func TestAlertingNamesExportedMetrics(t *testing.T) {
	have := exported(t)
	if !have["leasectl_job_overdue"] || !have["leasectl_stale_duration_seconds_bucket"] {
		t.Fatalf("the exposition lacks the per-job or histogram series: %v", have)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var alerts []string
	exprs := map[string]string{} // where -> expression
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			exprs[rulesFile+" "+r.Alert] = r.Expr
		}
	}
	for _, want := range []string{"LeasectlJobOverdue", "LeasectlJobQuarantined", "LeasectlJobCrashing", "LeasectlLeaseLost", "LeasectlReaperNotRunning"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s has no alert %s", rulesFile, want)
		}
	}

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err = os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for i, q := range p.Targets {
			exprs[dashboardFile+" "+p.Title+" #"+string(rune('A'+i))] = q.Expr
		}
	}
	// What on-call reads of a job of several slots (issue 24) is on the
	// dashboard.
	for _, want := range []string{"leasectl_job_slots", "leasectl_job_slots_in_use", "leasectl_job_queue_length"} {
		if !slices.ContainsFunc(slices.Collect(maps.Values(exprs)), func(e string) bool { return slices.Contains(metricName.FindAllString(e, -1), want) }) {
			t.Errorf("%s shows no %s", dashboardFile, want)
		}
	}
	for where, expr := range exprs {
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q names no leasectl metric", where, expr)
		}
		for _, n := range names {
			if !have[n] {
				t.Errorf("%s names %s, which the reaper does not export", where, n)
			}
		}
	}
}

// The packages install the rules and the dashboard beside the docs, for
// the operator to wire into Prometheus and Grafana.
func TestPackagesInstallAlerting(t *testing.T) {
	want := map[string]string{
		"packaging/" + rulesFile:     "/usr/share/leasectl/prometheus/leasectl.rules.yml",
		"packaging/" + dashboardFile: "/usr/share/leasectl/grafana/leasectl.json",
	}
	for _, c := range loadReleaseConfig(t).Nfpms[0].Contents {
		if dst, ok := want[c.Src]; ok && c.Dst == dst && c.FileInfo.Mode == 0o644 {
			delete(want, c.Src)
		}
	}
	for src, dst := range want {
		t.Errorf("the package does not install %s as %s (mode 0644)", src, dst)
	}
}
