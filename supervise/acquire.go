package supervise

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

// waitMargin is added to a holder's remaining TTL before trying again,
// so the retry lands after the expiry rather than a hair before it.
const waitMargin = 5 * time.Millisecond

// goneHolderRetry is how soon a waiter first asks again when the store
// still holds the job for a supervisor of this host that is already gone:
// its watchdog is ending the run's group, which the store then proves over
// (leasestore.GroupNoter), usually within milliseconds, but later on a
// loaded host. Each such answer in a row doubles it, up to the heartbeat,
// so that a store that waits for the lease's expiry instead is not asked
// in a tight loop.
const goneHolderRetry = 100 * time.Millisecond

// acquire gets the lease, as acquireLoop does, and reports whether a
// request went unanswered on the way (see acquireLoop). When it gives up
// after such a request, the store may have granted it all the same, to a
// holder that will never run it: it says so to the store (RecordLate
// without a token), which releases such a grant, or withdraws the crash
// counted for it once it expired, and refuses the request if it arrives
// later; or, if the store does not answer that either, it keeps it in the
// outbox for a later leasectl process to deliver.
func (s *Supervisor) acquire(ctx context.Context, cfg Config, log zerolog.Logger, ws *waitSub) (_ *leasestore.Lease, _ time.Time, _ Ending, unanswered bool, _ error) {
	lease, sent, ending, unanswered, err := s.acquireLoop(ctx, cfg, log, ws)
	if lease == nil && unanswered {
		s.abandon(cfg, log)
	}
	return lease, sent, ending, unanswered, err
}

// acquireLoop gets the lease, waiting for it with cfg.Wait. It returns the lease
// and the time the successful request was sent, or an Ending (Interrupted) or
// an error. With cfg.Wait, a store that fails or does not answer, from the
// first attempt on (a restart, a failover, a dropped SYN retransmitted a
// second later), does not end the wait: it is asked again after a jittered
// delay until --wait-timeout. unanswered reports whether a request went
// unanswered (it may have reached the store, and the store may hold a
// grant of this run's that it never heard of). With cfg.Wait, the
// subscription to the job's releases is left open in ws, for Run to close.
func (s *Supervisor) acquireLoop(ctx context.Context, cfg Config, log zerolog.Logger, ws *waitSub) (_ *leasestore.Lease, _ time.Time, _ Ending, unanswered bool, _ error) {
	req := leasestore.AcquireRequest{
		Job: cfg.Job, Holder: cfg.WorkerID, Host: cfg.Host, PID: cfg.PID, Command: cfg.Command,
		TTL: cfg.TTL, EvidenceTTL: cfg.EvidenceTTL, MaxCrashes: cfg.MaxCrashes, MinInterval: cfg.MinInterval,
		Region: cfg.Region, Deadline: cfg.Deadline, Expect: cfg.Expect,
		Slots: cfg.Slots, Wait: cfg.Wait,
	}
	// queued: the store put this run in the job's queue of waiters, which
	// it leaves when it gives up waiting.
	queued := false
	goneRetry := goneHolderRetry
	giveUp := func() {
		if queued {
			s.leave(cfg, log)
		}
	}
	// Only a store that can prove a run over once its supervisor is gone
	// (leasestore.GroupNoter) answers differently after that exit; on the
	// others, a release wakes the waiters whose turn it is, and a
	// supervisor killed leaves its lease to expire. There, watching the
	// exit would make every waiter of this host ask at once, each refused
	// but the first, while the first starts its child.
	provesGone := s.Store.NotesGroups()
	var released <-chan struct{}
	var timeout <-chan time.Time
	started := s.Clock.Now()
	if cfg.WaitTimeout > 0 {
		t := s.Clock.NewTimer(cfg.WaitTimeout)
		defer t.Stop()
		timeout = t.C()
	}
	for {
		if cfg.Wait && ws.sub == nil {
			// Subscribe before the attempt: a release between a refused
			// attempt and the subscription would otherwise be missed. A
			// subscription refused (a registry at its limit, a store
			// failing) does not stop the attempt: the lease may be free,
			// and a refused attempt still wakes at the holder's expiry.
			// Nor does one whose answer never comes back (a registry's
			// reply lost): like each ask, it is bounded by --safety.
			sctx, cancel := context.WithTimeout(ctx, cfg.Safety)
			var err error
			ws.sub, err = s.Store.Subscribe(sctx, cfg.Job, cfg.WorkerID)
			cancel()
			if err == nil {
				released = ws.sub.Released()
			} else {
				log.Warn().Err(err).Msg("cannot watch for the lease's release; trying it now, and again at the holder's expiry")
			}
		}
		lease, sent, err := s.ask(ctx, cfg, req, log)
		unanswered = unanswered || errors.Is(err, errUnanswered)
		if err == nil {
			if lease.ExpectDropped {
				log.Warn().Msg("the registry is older than job expectations: --expect-every is not kept, so the job is not reported overdue")
			}
			if c := lease.Recovered; c != nil {
				log.Warn().Str("crashed_worker", c.Holder).Str("crashed_host", c.Host).Int("crashes", c.Crashes).
					Msg("counted the previous run's crash: its supervisor vanished")
			}
			return lease, sent, Ending{}, unanswered, nil
		}
		var wake time.Duration
		var held *leasestore.HeldError
		var holderExited <-chan struct{}
		stopWatch := func() {}
		switch {
		case cfg.Wait && errors.As(err, &held):
			if s.OnWait != nil {
				s.OnWait(held)
			}
			log.Debug().Str("holder", held.Holder).Dur("expires_in", held.ExpiresIn).Int("position", held.Position).Msg("lease held; waiting")
			queued = held.Position > 0
			// In the queue, the run keeps its place by asking again once
			// per heartbeat; a release wakes it sooner. With a slot free
			// but promised to earlier waiters, there is no holder's
			// expiry to wait for.
			switch {
			case held.Holder == "":
				wake = cfg.Heartbeat
			case queued:
				wake = min(held.ExpiresIn+waitMargin, cfg.Heartbeat)
			default:
				wake = held.ExpiresIn + waitMargin
			}
			if s.WatchExit != nil && held.Host == cfg.Host && held.PID > 0 && provesGone {
				holderExited, stopWatch = s.WatchExit(held.PID)
				if fired(holderExited) {
					// Gone before the watch began: a wake-up now would
					// find the store answering as it just did.
					holderExited = nil
					wake = min(wake, goneRetry)
					goneRetry = min(2*goneRetry, cfg.Heartbeat)
				} else {
					goneRetry = goneHolderRetry
				}
			}
		case cfg.Wait && errors.Is(err, leasestore.ErrUnavailable):
			log.Warn().Err(err).Msg("the store failed while waiting for the lease; trying again")
			wake = s.retryAfter(cfg.Heartbeat)
		default:
			return nil, time.Time{}, Ending{}, unanswered, err
		}
		retry := s.Clock.NewTimer(wake)
		select {
		case <-released:
		case <-holderExited:
			log.Debug().Int("pid", held.PID).Msg("the holder's supervisor exited; trying again")
		case <-retry.C():
		case <-timeout:
			retry.Stop()
			stopWatch()
			giveUp()
			return nil, time.Time{}, Ending{}, unanswered, &WaitTimeoutError{Waited: s.Clock.Now().Sub(started), Last: err}
		case sig := <-s.Signals:
			retry.Stop()
			stopWatch()
			if ss, ok := sig.(syscall.Signal); ok && endsWait(ss) {
				giveUp()
				log.Info().Str("signal", ss.String()).Msg("signal while waiting for the lease: nothing held, nothing started")
				return nil, time.Time{}, Ending{Reason: Interrupted, Signal: ss, Detail: "interrupted while waiting"}, unanswered, nil
			}
		case <-ctx.Done():
			retry.Stop()
			stopWatch()
			giveUp()
			return nil, time.Time{}, Ending{}, unanswered, ctx.Err()
		}
		retry.Stop()
		stopWatch()
	}
}

// fired reports whether ch is closed already; a nil ch never fires.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// leave takes this run out of the job's queue of waiters when it gives up
// waiting, bounded by --safety. When the store does not answer, the run's
// place lapses within --ttl, as a waiter that died would.
func (s *Supervisor) leave(cfg Config, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Safety)
	defer cancel()
	if err := s.Store.Leave(ctx, cfg.Job, cfg.WorkerID); err != nil {
		log.Debug().Err(err).Msg("could not leave the job's queue; this run's place lapses within --ttl")
	}
}

// endsWait reports whether sig, received while waiting for the lease, ends
// the wait (the signals whose default action is to terminate a process; the
// user signals are ignored while nothing runs).
func endsWait(sig syscall.Signal) bool {
	return sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGHUP || sig == syscall.SIGQUIT
}
