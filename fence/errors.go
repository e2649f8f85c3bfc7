package fence

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrStale means the token may not be used: a newer one exists, or its
	// run has ended. *StaleError carries the details.
	ErrStale = errors.New("fence: stale fencing token")
	// ErrInvalid means the job ID or the token is malformed: no store
	// could have granted it.
	ErrInvalid = errors.New("fence: invalid job or token")
	// ErrClosed means the Checker was closed.
	ErrClosed = errors.New("fence: checker closed")
)

// StaleError is returned for a token that may not be used. It matches
// ErrStale with errors.Is.
type StaleError struct {
	Job string
	// Slot is the slot the token was checked in: 0 for Check and Admit.
	Slot  int
	Token int64
	// Newest is the highest token the checker knows for the job: the one
	// the store reported, or a higher one it accepted or learned before
	// (it never forgets a higher token: Kleppmann's rule). 0 when none.
	// For a job checked per slot, a refusal from memory names the slot's
	// mark, and one from the store the job's newest token.
	Newest int64
	// Live is whether Newest's run was live as last learned.
	Live bool
	// FromStore is true when the store answered this check, false when
	// the checker answered from memory.
	FromStore bool
}

// Error says why the token may not be used.
func (e *StaleError) Error() string {
	switch {
	case e.Token < e.Newest:
		return fmt.Sprintf("fencing token %d of job %q is stale: token %d is newer", e.Token, e.Job, e.Newest)
	case e.Newest == 0:
		return fmt.Sprintf("fencing token %d of job %q is stale: the store has no token for the job", e.Token, e.Job)
	case e.Token > e.Newest:
		return fmt.Sprintf("fencing token %d of job %q was never granted: the job is at token %d", e.Token, e.Job, e.Newest)
	default:
		return fmt.Sprintf("fencing token %d of job %q is stale: its run is no longer live", e.Token, e.Job)
	}
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }
