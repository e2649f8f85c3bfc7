package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Reaper finds crashed runs: evidence of a run without its liveness. The
// store counts each crash exactly once, whether the reaper or the job's next
// Acquire finds it first, and quarantines the job at the threshold its last
// run was started with.
type Reaper struct {
	Store *leasestore.Store
	// Metrics, when not nil, is updated after every pass.
	Metrics *Metrics
	// PassTimeout bounds each pass of Watch (0: only ctx bounds it), so a
	// frozen store fails the pass instead of stalling the reaper.
	PassTimeout time.Duration
	// BeforePass, when not nil, runs at the start of each pass of Watch,
	// bounded by the pass's ctx (scan --watch delivers the host's late
	// outcomes with it).
	BeforePass func(ctx context.Context)
	// OnOverdue, when not nil, receives after each pass of Watch the jobs
	// that became overdue, or came back in time, since the previous pass
	// (nothing when nothing changed); its error stops Watch, as found's.
	OnOverdue func(OverdueChange) error
	// Unsupported, when not nil, receives once the error of a store that
	// cannot list overdue jobs (errors.ErrUnsupported: a registry older
	// than expectations); the passes go on without them.
	Unsupported func(error)
	// Now is the reaper's clock, which stamps its last successful pass for
	// Metrics; nil: time.Now.
	Now func() time.Time
	// RecordNotices: each pass records the notices of what it saw (the
	// crashes it counted, the jobs that fell overdue or came back in
	// time) in the store, for a Deliverer to send (notices.go). It lists
	// the overdue jobs at every pass.
	RecordNotices bool
	// Recorded, when not nil, is called after notices were recorded (to
	// wake a Deliverer); NoticeFailed receives the failures to record
	// them, which do not fail the pass.
	Recorded     func()
	NoticeFailed func(error)

	notices noticeState

	// overdue are the jobs the last pass found overdue (Changed);
	// lastOverdue the last pass's list, when it read one.
	overdue     map[string]bool
	lastOverdue []leasestore.Overdue
	// noOverdue is set once Overdue was found unsupported.
	noOverdue bool
	// jobsRefreshed is when the per-job series were last refreshed.
	jobsRefreshed time.Time
}

// Pass runs one scan. It returns the crashes the store counted; they are
// returned even when reading the store-wide gauges, the overdue jobs or the
// jobs' series for Metrics failed afterwards, because they are consumed and
// would not be found again. With Metrics or OnOverdue it lists the overdue
// jobs too, and with Metrics it refreshes the jobs' series once a minute
// (JobSeriesEvery).
func (r *Reaper) Pass(ctx context.Context) ([]leasestore.Crash, error) {
	r.Metrics.observeRun()
	r.lastOverdue = nil
	crashes, err := r.Store.Scan(ctx)
	if err != nil {
		r.Metrics.observeFailure()
		return nil, fmt.Errorf("scan for crashed jobs: %w", err)
	}
	r.Metrics.observeCrashes(crashes)
	if r.RecordNotices {
		r.noteCrashes(ctx, crashes)
	}
	if r.Metrics == nil && r.OnOverdue == nil && !r.RecordNotices {
		return crashes, nil
	}
	if r.Metrics != nil {
		counts, err := r.Store.Counts(ctx)
		if err != nil {
			r.Metrics.observeFailure()
			return crashes, fmt.Errorf("read in-flight and quarantined counts: %w", err)
		}
		r.Metrics.observeCounts(counts)
	}
	overdue, err := r.Overdue(ctx)
	if errors.Is(err, errors.ErrUnsupported) {
		if !r.noOverdue && r.Unsupported != nil {
			r.Unsupported(err)
		}
		r.noOverdue, err = true, nil
	}
	if err != nil && r.Metrics == nil && r.OnOverdue == nil {
		// Read for the notices alone: the pass did what it was for.
		r.noticeFailed(err)
		return crashes, nil
	}
	if err != nil {
		return crashes, err
	}
	if r.RecordNotices && !r.noOverdue {
		r.noteOverdue(ctx, overdue, r.now())
	}
	if err := r.refreshJobs(ctx, overdue); err != nil {
		r.Metrics.observeFailure()
		return crashes, err
	}
	r.lastOverdue = overdue
	r.Metrics.observePass(r.now())
	return crashes, nil
}

// Watch runs a pass at once and then on every value from ticks, until ctx
// is done; it then returns nil. found receives the crashes of each pass
// that found some; failed receives each pass's error, and the reaper goes
// on (a store outage must not stop it). Watch returns found's error, if
// any: the output is broken and there is no point in going on.
func (r *Reaper) Watch(ctx context.Context, ticks <-chan time.Time, found func([]leasestore.Crash) error, failed func(error)) error {
	for {
		crashes, err := r.pass(ctx)
		if len(crashes) > 0 {
			if ferr := found(crashes); ferr != nil {
				return ferr
			}
		}
		if err == nil && r.OnOverdue != nil {
			if c := r.Changed(r.lastOverdue); len(c.Late) > 0 || len(c.BackInTime) > 0 {
				if ferr := r.OnOverdue(c); ferr != nil {
					return ferr
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
		}
	}
}

func (r *Reaper) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func (r *Reaper) pass(ctx context.Context) ([]leasestore.Crash, error) {
	if r.PassTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.PassTimeout)
		defer cancel()
	}
	if r.BeforePass != nil {
		r.BeforePass(ctx)
	}
	return r.Pass(ctx)
}

// Crashes prints the crashes one scan found. An empty result says "no
// crashed jobs found" (see Printer for where).
func (p *Printer) Crashes(crashes []leasestore.Crash) error {
	if len(crashes) == 0 {
		return p.empty("no crashed jobs found")
	}
	if p.Format == FormatJSON {
		out := make([]crashJSON, len(crashes))
		for i := range crashes {
			out[i] = crashView(&crashes[i], crashes[i].DetectedAt)
		}
		return p.writeJSON(out)
	}
	return p.writeGrid(crashGrid(crashes))
}

// CrashStream prints the crashes of one pass of a watching reaper: like
// Crashes, but in JSON as one object per line (JSON Lines), so that a
// consumer can read crashes as they are found.
func (p *Printer) CrashStream(crashes []leasestore.Crash) error {
	if p.Format != FormatJSON {
		return p.writeGrid(crashGrid(crashes))
	}
	for i := range crashes {
		b, err := marshalLine(crashView(&crashes[i], crashes[i].DetectedAt))
		if err != nil {
			return err
		}
		if _, err := p.Out.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func crashGrid(crashes []leasestore.Crash) grid {
	g := grid{headers: []string{"JOB", "WORKER", "HOST", "PID", "STARTED", "STALE FOR", "CRASHES", "QUARANTINED"}}
	g.text = textColumns(g.headers, "JOB", "WORKER", "HOST")
	for i := range crashes {
		c := &crashes[i]
		g.rows = append(g.rows, []cell{
			textCell(c.Job), textCell(c.Holder), textCell(c.Host), intCell(int64(c.PID)),
			agoCell(c.StartedAt, c.DetectedAt), durationCell(staleFor(c, c.DetectedAt)),
			intCell(int64(c.Crashes)), yesNo(c.Quarantined),
		})
	}
	return g
}

// yesNo shows a flag as yes/no on a terminal and true/false when piped.
func yesNo(b bool) cell {
	if b {
		return cell{text: "yes", plain: "true"}
	}
	return cell{text: "no", plain: "false"}
}
