package inspect

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// TestNeverSeen: a job is never seen only when the store has no trace of
// it at all; any one trace (a lease, a token, a quarantine added before
// any run, an outcome, history) makes it known.
func TestNeverSeen(t *testing.T) {
	at := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		st   leasestore.JobStatus
		want bool
	}{
		{"nothing", leasestore.JobStatus{Job: "j", State: leasestore.StateIdle, Now: at}, true},
		{"a live lease", leasestore.JobStatus{Holder: &leasestore.Holder{Job: "j"}}, false},
		{"crash evidence", leasestore.JobStatus{Crashed: &leasestore.Crash{Job: "j"}}, false},
		{"a token granted", leasestore.JobStatus{LastToken: 7}, false},
		{"attempts", leasestore.JobStatus{Attempts: 1}, false},
		{"crashes", leasestore.JobStatus{Crashes: 1}, false},
		{"a quarantine added before any run", leasestore.JobStatus{Quarantine: &leasestore.Quarantine{Job: "j"}}, false},
		{"an outcome", leasestore.JobStatus{LastOutcome: &leasestore.LastOutcome{}}, false},
		{"a success", leasestore.JobStatus{LastSuccess: at}, false},
		{"a region", leasestore.JobStatus{Region: "eu"}, false},
		{"history", leasestore.JobStatus{History: []leasestore.Event{{At: at, Kind: leasestore.EventReleased}}}, false},
		{"an expectation set before any run", leasestore.JobStatus{Expect: &leasestore.Expectation{Every: time.Hour}}, false},
	}
	for _, tt := range tests {
		if got := NeverSeen(&tt.st); got != tt.want {
			t.Errorf("%s: NeverSeen = %v, want %v", tt.name, got, tt.want)
		}
	}
}
