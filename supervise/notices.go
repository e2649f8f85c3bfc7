package supervise

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

// NoticeRecorder records events worth notifying, for a reaper to send
// (leasestore.Notices).
type NoticeRecorder interface {
	PutNotices(ctx context.Context, notices []leasestore.Notice) error
}

// notify records notices with s.Notices, if set, within ctx. A failure is
// logged and dropped: the run goes on, and that event is not notified
// (docs/semantics.md, Notices, says when that happens).
func (s *Supervisor) notify(ctx context.Context, log zerolog.Logger, notices ...leasestore.Notice) {
	if s.Notices == nil {
		return
	}
	if err := s.Notices.PutNotices(ctx, notices); err != nil {
		log.Warn().Err(err).Msg("recording the notice of this event failed: no notification will be sent for it")
	}
}

// notifyRecovered records, beside the run, the previous run's crash that
// lease's Acquire counted, if any, bounded by --safety: a store slow to
// take notices never delays the child's start. The returned func waits
// for it, for Run to call before it returns.
func (s *Supervisor) notifyRecovered(cfg Config, lease *leasestore.Lease, log zerolog.Logger) (wait func()) {
	c := lease.Recovered
	if c == nil || s.Notices == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Safety)
		defer cancel()
		s.notify(ctx, log, leasestore.CrashNotices(*c)...)
	}()
	return func() { <-done }
}

// notifyLeaseLost records that the run's lease was lost and its child
// killed, bounded as a release is.
func (r *run) notifyLeaseLost() {
	ctx, cancel := r.releaseContext()
	defer cancel()
	r.s.notify(ctx, r.log, leasestore.LeaseLostNotice(r.lease, r.cfg.Host, r.detail, r.s.Clock.Now()))
}

// notifyCrash records the crash the store counted when it took the run's
// crashed outcome out, and the quarantine it led to, if any: it reads the
// job's status for them (one more round trip, after crashes alone), bounded
// by --safety, once the outcome was recorded. A crash counted by a reaper
// or a later Acquire before (the run's lease was lost) has the same key,
// so it is one notice whoever records it.
func (r *run) notifyCrash(out leasestore.Outcome) {
	if r.s.Notices == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Safety)
	defer cancel()
	st, err := r.s.Store.Status(ctx, r.lease.Job)
	if err != nil {
		r.log.Warn().Err(err).Msg("reading the job's status for the notice of its crash failed: no notification will be sent for it")
		return
	}
	c, ok := leasestore.CountedCrash(st, r.lease, r.cfg.Host, r.cfg.PID)
	if !ok {
		return
	}
	r.s.notify(ctx, r.log, leasestore.ReportedCrashNotices(c, out.Reason)...)
}
