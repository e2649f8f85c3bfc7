package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/leasectl/leasectl/leasestore"
)

// Overdue lists the jobs past their expectation (leasestore.Expectation):
// a dead-man's switch, for jobs that silently stopped running. It updates
// Metrics, when set, and remembers the jobs, so that Changed can say which
// became overdue, or came back in time, since the previous call.
func (r *Reaper) Overdue(ctx context.Context) ([]leasestore.Overdue, error) {
	list, err := r.Store.Overdue(ctx)
	if err != nil {
		if !errors.Is(err, errors.ErrUnsupported) {
			r.Metrics.observeFailure()
		}
		return nil, fmt.Errorf("list overdue jobs: %w", err)
	}
	r.Metrics.observeOverdue(list)
	return list, nil
}

// OverdueChange is what changed in the overdue jobs between two passes.
type OverdueChange struct {
	// Late are the jobs that became overdue (all of them at the first
	// pass).
	Late []leasestore.Overdue
	// BackInTime are the jobs that were overdue and no longer are: they
	// succeeded, or their expectation was cleared.
	BackInTime []string
}

// Changed returns what changed in the overdue jobs since the previous
// call, list being this pass's, and remembers list.
func (r *Reaper) Changed(list []leasestore.Overdue) OverdueChange {
	var c OverdueChange
	now := make(map[string]bool, len(list))
	for _, o := range list {
		now[o.Job] = true
		if !r.overdue[o.Job] {
			c.Late = append(c.Late, o)
		}
	}
	for job := range r.overdue {
		if !now[job] {
			c.BackInTime = append(c.BackInTime, job)
		}
	}
	slices.Sort(c.BackInTime)
	r.overdue = now
	return c
}

// overdueJSON is an overdue job in JSON (doc.go).
type overdueJSON struct {
	Job         string   `json:"job"`
	EveryMS     int64    `json:"every_ms"`
	GraceMS     int64    `json:"grace_ms"`
	LastSuccess jsonTime `json:"last_success"`
	DueAt       jsonTime `json:"due_at"`
	// SilentForMS is how long since the last success (or, never having
	// succeeded, since the expectation was set), by the store's clock.
	SilentForMS int64 `json:"silent_for_ms"`
	OverdueMS   int64 `json:"overdue_ms"`
}

func overdueView(o *leasestore.Overdue) overdueJSON {
	return overdueJSON{Job: o.Job, EveryMS: millis(o.Expect.Every), GraceMS: millis(o.Expect.Grace),
		LastSuccess: jsonTime(o.LastSuccess), DueAt: jsonTime(o.Due), SilentForMS: millis(o.Silence()),
		OverdueMS: millis(o.Now.Sub(o.Due))}
}

// Overdue prints the jobs past their expectation: job, how long since its
// last success (or "never"), its period and grace, and how long overdue.
// An empty list says "no overdue jobs".
func (p *Printer) Overdue(list []leasestore.Overdue) error {
	if len(list) == 0 {
		return p.empty("no overdue jobs")
	}
	if p.Format == FormatJSON {
		out := make([]overdueJSON, len(list))
		for i := range list {
			out[i] = overdueView(&list[i])
		}
		return p.writeJSON(out)
	}
	g := grid{headers: []string{"JOB", "LAST SUCCESS", "SILENT FOR", "EVERY", "GRACE", "OVERDUE BY"}}
	g.text = textColumns(g.headers, "JOB")
	for i := range list {
		o := &list[i]
		last := agoCell(o.LastSuccess, o.Now)
		if o.LastSuccess.IsZero() {
			last = cell{text: "never", plain: ""}
		}
		g.rows = append(g.rows, []cell{textCell(o.Job), last, durationCell(o.Silence()),
			durationCell(o.Expect.Every), durationCell(o.Expect.Grace), durationCell(o.Now.Sub(o.Due))})
	}
	return p.writeGrid(g)
}

// CrashesAndOverdue prints what a scan found, crashes and overdue jobs:
// two tables, the overdue one after a blank line (on a terminal; piped, the
// rows alone), or with --json one object {"crashes": [...], "overdue":
// [...]}.
func (p *Printer) CrashesAndOverdue(crashes []leasestore.Crash, overdue []leasestore.Overdue) error {
	if p.Format == FormatJSON {
		out := struct {
			Crashes []crashJSON   `json:"crashes"`
			Overdue []overdueJSON `json:"overdue"`
		}{make([]crashJSON, len(crashes)), make([]overdueJSON, len(overdue))}
		for i := range crashes {
			out.Crashes[i] = crashView(&crashes[i], crashes[i].DetectedAt)
		}
		for i := range overdue {
			out.Overdue[i] = overdueView(&overdue[i])
		}
		return p.writeJSON(out)
	}
	if err := p.Crashes(crashes); err != nil {
		return err
	}
	if p.Format == FormatTable {
		if _, err := fmt.Fprintln(p.Out); err != nil {
			return err
		}
	}
	return p.Overdue(overdue)
}

// OverdueLine is an overdue job in one line's words, for a reaper's log.
func OverdueLine(o leasestore.Overdue) string {
	since := "never succeeded since its expectation was set " + shortDuration(o.Silence()) + " ago"
	if !o.LastSuccess.IsZero() {
		since = "last succeeded " + shortDuration(o.Silence()) + " ago"
	}
	return fmt.Sprintf("job %s is overdue: %s, expected every %s (grace %s)", o.Job, since,
		shortDuration(o.Expect.Every), shortDuration(o.Expect.Grace))
}
