package cmd

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
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

// TestRunHelpListsItsExitCodes: every exit code a run can end with, other
// than its child's own, is in `run --help`, which is where a cron author
// looks for them.
func TestRunHelpListsItsExitCodes(t *testing.T) {
	long := strings.Join(strings.Fields(NewCmdRun(NewFactory(), nil).Long), " ")
	for _, code := range []int{exitUsage, exitUnavailable, exitHeld, exitQuarantined, exitDeadline, exitRegion, exitMaxRuntime, exitLeaseLost} {
		if !strings.Contains(long, fmt.Sprintf(" %d ", code)) {
			t.Errorf("run --help does not list exit %d", code)
		}
	}
}
