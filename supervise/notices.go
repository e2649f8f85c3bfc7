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

// notifyLeaseLost records that the run's lease was lost and its child
// killed, bounded as a release is.
func (r *run) notifyLeaseLost() {
	ctx, cancel := r.releaseContext()
	defer cancel()
	r.s.notify(ctx, r.log, leasestore.LeaseLostNotice(r.lease, r.cfg.Host, r.detail, r.s.Clock.Now()))
}
