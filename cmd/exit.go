package cmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/supervise"
)

// Exit codes (docs/design.md §3). They are decided here and nowhere else.
const (
	exitOK          = 0
	exitFailure     = 1   // a check answered "no" (token check), or an unexpected error
	exitUsage       = 64  // EX_USAGE: bad flag, duration relation, job ID
	exitUnavailable = 69  // EX_UNAVAILABLE: the store is unreachable or failing
	exitHeld        = 75  // EX_TEMPFAIL: held elsewhere (--conflict-exit-code changes it)
	exitQuarantined = 76  // the job is quarantined
	exitDeadline    = 77  // the job's hard deadline (--ttl-deadline) passed: it is no longer retried
	exitRegion      = 78  // the job belongs to another region than the worker's
	exitForbidden   = 79  // the store refused the operation to the credentials' role (a registry's 403)
	exitMaxRuntime  = 124 // --max-runtime passed (like timeout(1))
	exitStopped     = 80  // an operator stopped the run (leasectl stop)
	exitFound       = 81  // scan --fail-on: the scan found what it names (a crash, an overdue job, a quarantined job)
	exitLeaseLost   = 125 // the lease was lost; the child was killed
	exitSignalBase  = 128 // 128+N: the child died of signal N, or a signal ended the wait
)

// exitError carries an exit code chosen by a command, with an optional
// message for stderr (an empty message prints nothing).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitWith returns an error that makes leasectl exit with code, printing err
// when it is not nil.
func exitWith(code int, err error) error { return &exitError{code: code, err: err} }

func usageError(err error) error { return exitWith(exitUsage, err) }

// exitCode maps an error returned by a command to leasectl's exit code.
func exitCode(err error) int {
	var ee *exitError
	var idErr *leasestore.InvalidJobIDError
	var qErr *leasestore.QuarantinedError
	var hErr *leasestore.HeldError
	var urlErr *leasestore.URLError
	var nsErr *leasestore.NamespaceError
	var dErr *leasestore.DeadlineError
	var rErr *leasestore.RegionError
	var reqErr *leasestore.RequestError
	var slotsErr *leasestore.SlotsError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &idErr), supervise.IsConfigError(err), errors.As(err, &urlErr), errors.As(err, &nsErr), errors.As(err, &reqErr), errors.As(err, &slotsErr):
		// A store may find a URL unusable only when it first talks to the
		// server (a database it does not have): still a usage error.
		return exitUsage
	case errors.As(err, &qErr):
		return exitQuarantined
	case errors.As(err, &hErr):
		return exitHeld
	case errors.As(err, &dErr):
		return exitDeadline
	case errors.As(err, &rErr):
		return exitRegion
	case errors.Is(err, leasestore.ErrForbidden):
		return exitForbidden
	case errors.Is(err, leasestore.ErrUnavailable):
		return exitUnavailable
	case isCobraUsage(err):
		return exitUsage
	default:
		return exitFailure
	}
}

// isCobraUsage recognises the errors cobra returns for unknown commands and
// wrong argument counts. Matching text is the exception STYLE allows only
// where a library gives nothing else: cobra returns these as plain
// fmt.Errorf values, with no type or sentinel to match.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, prefix := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "requires at most", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// runExitCode is the exit code of a run that got past the wait for its
// lease (docs/design.md §3).
func runExitCode(e supervise.Ending) int {
	switch e.Reason {
	case supervise.Interrupted:
		return exitSignalBase + int(e.Signal)
	case supervise.NotStarted:
		return e.Start.Code
	case supervise.LeaseLost:
		return exitLeaseLost
	case supervise.MaxRuntime:
		return exitMaxRuntime
	case supervise.Stopped:
		return exitStopped
	default:
		return e.Exit.ExitCode()
	}
}
