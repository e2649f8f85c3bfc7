package leasestore

import "fmt"

// ByLeasectl is Quarantine.By of a job quarantined for crashing, and the
// worker of the events leasectl itself records about a job.
const ByLeasectl = "leasectl"

// LateRecorded reports whether history holds a late-outcome event of the
// run of holder with token: its outcome was recorded late already.
func LateRecorded(history []Event, holder string, token int64) bool {
	for _, e := range history {
		if e.Kind == EventLateOutcome && e.Worker == holder && e.Token == token {
			return true
		}
	}
	return false
}

// String says in words what the correction did.
func (c Correction) String() string {
	switch {
	case c.Released:
		return "the run's lease was still there and is released"
	case c.QuarantineLifted:
		return fmt.Sprintf("the crash counted for the run is withdrawn and the quarantine it led to lifted (%d consecutive crashes)", c.Crashes)
	case c.CrashWithdrawn:
		return fmt.Sprintf("the crash counted for the run is withdrawn (%d consecutive crashes)", c.Crashes)
	default:
		return "recorded; nothing else to correct"
	}
}
