package leasestore

import (
	"testing"
	"time"
)

// TestQuarantinedErrorSaysEachThingOnce: an automatic quarantine's reason
// is the crash count the message already gives; an operator's is not.
func TestQuarantinedErrorSaysEachThingOnce(t *testing.T) {
	since := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	tests := []struct {
		q    Quarantine
		want string
	}{
		{Quarantine{Job: "p", Since: since, Crashes: 3, Reason: "3 consecutive crashes", By: "leasectl", LastHolder: "w1", LastHost: "h1"},
			`job "p" is quarantined since 2026-11-26T02:00:00Z after 3 consecutive crashes (last worker w1 on h1)`},
		{Quarantine{Job: "p", Since: since, Reason: "bad input, INC-1234", By: "ops"},
			`job "p" is quarantined since 2026-11-26T02:00:00Z: bad input, INC-1234`},
		{Quarantine{Job: "p", Since: since, Crashes: 1, Reason: "bad input", By: "ops"},
			`job "p" is quarantined since 2026-11-26T02:00:00Z after 1 consecutive crashes: bad input`},
	}
	for _, tt := range tests {
		if got := (&QuarantinedError{tt.q}).Error(); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

// TestStaleTokenWording: a token above every grant was never granted (the
// fence package's words too); below the current one, or without a live
// lease, it is stale.
func TestStaleTokenWording(t *testing.T) {
	for _, tt := range []struct {
		e    StaleTokenError
		want string
	}{
		{StaleTokenError{Job: "j", Token: 9, Current: 5, Live: true}, `token 9 was never granted: job "j" is at token 5`},
		{StaleTokenError{Job: "j", Token: 4, Current: 5, Live: true}, `token 4 is stale: job "j" is at token 5`},
		{StaleTokenError{Job: "j", Token: 5, Current: 5}, `token 5 is stale: its lease on job "j" is no longer live`},
		{StaleTokenError{Job: "j", Token: 5}, `token 5 is stale: job "j" has no token in the store`},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
