package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// maxOverdueNotices bounds the overdue and back-in-time notices one pass
// records: a store whose 100,000 jobs all fall overdue at once (a clock
// jump, a restored backup) costs a few passes of bounded work, not one
// pass of 100,000 writes.
const maxOverdueNotices = 1000

// The reaper records in the store, right after it saw them, the events its
// passes see (docs/semantics.md, Notices): the crashes Scan counted (and
// the quarantines they led to), and the jobs that fell overdue or came
// back in time. A Deliverer (package notify) sends them. A notice whose
// put failed is kept in memory and put again at the next pass; one of a
// reaper killed before it put it is lost.

// noticeState is what the reaper knows of the notices it records.
type noticeState struct {
	// pending are notices not yet put (their put failed), oldest first.
	pending []leasestore.Notice
	// overdue maps each job the notices say is overdue to its due time,
	// read from the store's notices at the first pass (seeded), so that a
	// restarted reaper still says when a job comes back in time.
	overdue map[string]time.Time
	seeded  bool
}

// noteCrashes records the notices of crashes.
func (r *Reaper) noteCrashes(ctx context.Context, crashes []leasestore.Crash) {
	for _, c := range crashes {
		r.notices.pending = append(r.notices.pending, leasestore.CrashNotices(c)...)
	}
	r.flushNotices(ctx)
}

// noteOverdue records the notices of the jobs of list, this pass's
// overdue jobs, that fell overdue since the notices said so last, and of
// those that came back in time, at now.
func (r *Reaper) noteOverdue(ctx context.Context, list []leasestore.Overdue, now time.Time) {
	if err := r.seedOverdue(ctx); err != nil {
		r.noticeFailed(err)
		return
	}
	seen := make(map[string]bool, len(list))
	added := 0
	for _, o := range list {
		seen[o.Job] = true
		due, noticed := r.notices.overdue[o.Job]
		if noticed && due.Equal(o.Due) || added == maxOverdueNotices {
			continue
		}
		if noticed {
			r.notices.pending = append(r.notices.pending, leasestore.BackInTimeNotice(o.Job, due, o.Now))
		}
		r.notices.pending = append(r.notices.pending, leasestore.OverdueNotice(o, OverdueLine(o)))
		r.notices.overdue[o.Job] = o.Due
		added++
	}
	for job, due := range r.notices.overdue {
		if !seen[job] && added < maxOverdueNotices {
			r.notices.pending = append(r.notices.pending, leasestore.BackInTimeNotice(job, due, now))
			delete(r.notices.overdue, job)
			added++
		}
	}
	r.flushNotices(ctx)
}

// seedOverdue reads, once, the jobs the store's notices say are overdue:
// an overdue notice without the back-in-time notice of the same due time.
func (r *Reaper) seedOverdue(ctx context.Context) error {
	if r.notices.seeded {
		return nil
	}
	kept, err := r.Store.ListNotices(ctx)
	if err != nil {
		return fmt.Errorf("read the notices of overdue jobs: %w", err)
	}
	r.notices.overdue = map[string]time.Time{}
	back := map[string]bool{}
	for _, n := range kept {
		if n.Kind == leasestore.NoticeBackInTime {
			back[n.Job+"\n"+n.Due.String()] = true
		}
	}
	for _, n := range kept {
		if n.Kind == leasestore.NoticeOverdue && !back[n.Job+"\n"+n.Due.String()] && n.Due.After(r.notices.overdue[n.Job]) {
			r.notices.overdue[n.Job] = n.Due
		}
	}
	r.notices.seeded = true
	return nil
}

// flushNotices puts the pending notices, keeping them for the next pass if
// the put fails (at most leasestore.NoticeCap of them, the newest).
func (r *Reaper) flushNotices(ctx context.Context) {
	if len(r.notices.pending) == 0 {
		return
	}
	if err := r.Store.PutNotices(ctx, r.notices.pending); err != nil {
		if over := len(r.notices.pending) - leasestore.NoticeCap; over > 0 {
			r.notices.pending = r.notices.pending[over:]
		}
		r.noticeFailed(fmt.Errorf("record %d notices (kept for the next pass): %w", len(r.notices.pending), err))
		return
	}
	r.notices.pending = nil
	if r.Recorded != nil {
		r.Recorded()
	}
}

func (r *Reaper) noticeFailed(err error) {
	if r.NoticeFailed != nil {
		r.NoticeFailed(err)
	}
}
