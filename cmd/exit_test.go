package cmd

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/httpstore"
)

// TestExitCodeOfStoreRefusals is the exit-code table of docs/design.md §3 for
// the store's answers, wrapped as commands wrap them.
func TestExitCodeOfStoreRefusals(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"held", &leasestore.HeldError{Job: "j"}, exitHeld},
		{"quarantined", &leasestore.QuarantinedError{}, exitQuarantined},
		{"ttl_deadline passed", &leasestore.DeadlineError{Job: "j", Deadline: time.Unix(1, 0), Now: time.Unix(2, 0)}, exitDeadline},
		{"another region", &leasestore.RegionError{Job: "j", Region: "us", Requested: "eu"}, exitRegion},
		{"store unavailable", &leasestore.UnavailableError{Op: "acquire", Err: errors.New("refused")}, exitUnavailable},
		{"invalid job ID", &leasestore.InvalidJobIDError{ID: "a b"}, exitUsage},
		{"a field the store refused", &leasestore.RequestError{Op: "acquire", Field: "worker_id", Reason: "it holds a control character"}, exitUsage},
		{"another namespace", &leasestore.NamespaceError{Namespace: "b", Reason: "the registry serves namespace \"a\""}, exitUsage},
		{"a role the registry refuses", &httpstore.AuthError{Registry: "https://r", Status: http.StatusForbidden, Role: "worker", Required: "operator"}, exitForbidden},
		{"a token the registry does not know", &leasestore.UnavailableError{Op: "acquire", Err: &httpstore.AuthError{Registry: "https://r", Status: http.StatusUnauthorized}}, exitUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitCode(fmt.Errorf("acquire: %w", tc.err)); got != tc.want {
				t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
	if exitDeadline == exitRegion || exitDeadline == exitQuarantined || exitRegion == exitQuarantined {
		t.Error("the deadline, region and quarantine refusals must have exit codes of their own")
	}
}

// TestRunHelpListsItsExitCodes: every exit code the README's table for
// `leasectl run` lists is in `run --help`, which is where a cron author
// looks for them.
func TestRunHelpListsItsExitCodes(t *testing.T) {
	table := between(t, "../README.md", "\n### Exit codes\n", "\n\n### ")
	codes := regexp.MustCompile(`(?m)^\| ([^|]*\d[^|]*) \|`).FindAllStringSubmatch(table, -1)
	if len(codes) < 10 {
		t.Fatalf("found %d rows with codes in the README's exit code table", len(codes))
	}
	long := " " + strings.Join(strings.Fields(NewCmdRun(NewFactory(), nil).Long), " ") + " "
	for _, row := range codes {
		for _, code := range regexp.MustCompile(`\d+`).FindAllString(row[1], -1) {
			if !regexp.MustCompile(`[ /]` + code + `[ /,;.]`).MatchString(long) {
				t.Errorf("run --help does not list exit %s, which the README lists", code)
			}
		}
	}
}

// TestVersionFlagAndCommandAgree: `leasectl --version` and `leasectl
// version` print the same line.
func TestVersionFlagAndCommandAgree(t *testing.T) {
	cmdOut, _, code := releaseRun(t, "version")
	flagOut, _, flagCode := releaseRun(t, "--version")
	if code != 0 || flagCode != 0 || cmdOut != flagOut || !strings.HasPrefix(cmdOut, "leasectl ") {
		t.Errorf("version: exit %d %q; --version: exit %d %q; want the same line", code, cmdOut, flagCode, flagOut)
	}
}
