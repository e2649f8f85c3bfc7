package cmd

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
)

// failOnChoices are what scan --fail-on can name.
var failOnChoices = []string{"crashed", "overdue", "quarantined"}

// scanOnce is a single scan: it counts the crashes, lists the overdue jobs
// (a warning on stderr each, and on stdout with --overdue), and exits
// exitFound when --fail-on names something it found. When listing the
// overdue jobs fails (a registry older than expectations), the scan goes
// on with a warning, unless --overdue or --fail-on overdue asked for them.
func scanOnce(ctx context.Context, opts *ScanOptions, s *leasestore.Store) error {
	reaper := &inspect.Reaper{Store: s, RecordNotices: true, NoticeFailed: func(err error) {
		fmt.Fprintf(opts.IO.ErrOut, "leasectl: warning: %v\n", err)
	}}
	crashes, err := reaper.Pass(ctx)
	if err != nil {
		return err
	}
	overdue, oerr := reaper.Overdue(ctx)
	if oerr != nil && (opts.Overdue || slices.Contains(opts.FailOn, "overdue")) {
		// The crashes are counted: they must reach the operator.
		_ = printer(opts.IO, opts.JSON, opts.Now()).Crashes(crashes)
		return oerr
	}
	if oerr != nil || len(overdue) > 0 {
		log, err := opts.Logger()
		if err != nil {
			return err
		}
		if oerr != nil {
			log.Warn().Err(oerr).Msg("could not look for overdue jobs; the crashes are counted")
		}
		logOverdue(log, inspect.OverdueChange{Late: overdue})
	}
	p := printer(opts.IO, opts.JSON, opts.Now())
	if opts.Overdue {
		err = p.CrashesAndOverdue(crashes, overdue)
	} else {
		err = p.Crashes(crashes)
	}
	if err != nil {
		return err
	}
	var found []string
	for _, what := range failOnChoices {
		if !slices.Contains(opts.FailOn, what) {
			continue
		}
		var n int
		switch what {
		case "crashed":
			n = len(crashes)
		case "overdue":
			n = len(overdue)
		case "quarantined":
			q, err := s.Quarantined(ctx)
			if err != nil {
				return fmt.Errorf("list quarantined jobs for --fail-on: %w", err)
			}
			n = len(q)
		}
		if n > 0 {
			found = append(found, fmt.Sprintf("%d %s", n, what))
		}
	}
	if len(found) > 0 {
		return exitWith(exitFound, fmt.Errorf("scan found %s (--fail-on)", strings.Join(found, ", ")))
	}
	return nil
}

// logOverdue logs the jobs that became overdue as warnings and those back
// in time at info level.
func logOverdue(log zerolog.Logger, c inspect.OverdueChange) {
	for _, o := range c.Late {
		log.Warn().Str("job", o.Job).Msg(inspect.OverdueLine(o))
	}
	for _, job := range c.BackInTime {
		log.Info().Str("job", job).Msg("job " + job + " is back in time: it succeeded, or its expectation was cleared")
	}
}

// noOverdue logs, once, that the store cannot list overdue jobs (a
// registry older than expectations): the reaper goes on without them.
func noOverdue(log zerolog.Logger) func(error) {
	return func(err error) {
		log.Warn().Err(err).Msg("cannot look for overdue jobs; reaping crashed jobs without them")
	}
}
