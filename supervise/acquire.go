package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

// waitMargin is added to a holder's remaining TTL before trying again,
// so the retry lands after the expiry rather than a hair before it.
const waitMargin = 5 * time.Millisecond

// acquire gets the lease, as acquireLoop does, and reports whether a
// request went unanswered on the way (see acquireLoop). When it gives up
// after such a request, the store may have granted it all the same, to a
// holder that will never run it: it says so to the store (RecordLate
// without a token), which releases such a grant, or withdraws the crash
// counted for it once it expired, and refuses the request if it arrives
// later; or, if the store does not answer that either, it keeps it in the
// outbox for a later leasectl process to deliver.
func (s *Supervisor) acquire(ctx context.Context, cfg Config, log zerolog.Logger) (_ *leasestore.Lease, _ time.Time, _ Ending, ghostly bool, _ error) {
	lease, sent, ending, ghostly, err := s.acquireLoop(ctx, cfg, log)
	if lease == nil && ghostly {
		s.abandon(cfg, log)
	}
	return lease, sent, ending, ghostly, err
}

// abandon tells the store that this run gave up on a grant it never heard
// of, bounded by --safety, or keeps that in the outbox.
func (s *Supervisor) abandon(cfg Config, log zerolog.Logger) {
	lr, ok := s.Store.(leasestore.LateRecorder)
	if !ok {
		return
	}
	late := gaveUp(cfg, 0)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Safety)
	defer cancel()
	c, err := lr.RecordLate(ctx, late)
	switch {
	case err == nil && c.Released:
		log.Warn().Bool("crash_withdrawn", false).Msg("gave up on an acquire whose answer never arrived; the store had granted it, and the grant is released")
	case err == nil && c.CrashWithdrawn:
		log.Warn().Bool("crash_withdrawn", true).Bool("quarantine_lifted", c.QuarantineLifted).Int("crashes", c.Crashes).
			Msg("gave up on an acquire whose answer never arrived; the store had granted it, and counted the grant as a crash once it expired: " + c.String())
	case err == nil:
	case s.Outbox == nil:
		log.Debug().Err(err).Msg("gave up on an acquire whose answer never arrived; if the store granted it, the grant holds the job for a TTL")
	default:
		// Quietly: a grant may not exist at all; the outbox settles it.
		if perr := s.Outbox.Put(late); perr != nil {
			log.Warn().Err(perr).Msg("gave up on an acquire whose answer never arrived, and keeping that in the outbox failed: if the store granted it, the grant holds the job for a TTL")
			return
		}
		log.Debug().Err(err).Str("outbox", s.Outbox.Dir()).
			Msg("gave up on an acquire whose answer never arrived; kept in the outbox, so that the next leasectl run or scan on this host releases the grant if there is one")
	}
}

// acquireLoop gets the lease, waiting for it with cfg.Wait. It returns the lease
// and the time the successful request was sent, or an Ending (Interrupted) or
// an error. With cfg.Wait, a store that fails or does not answer, from the
// first attempt on (a restart, a failover, a dropped SYN retransmitted a
// second later), does not end the wait: it is asked again after a jittered
// delay until --wait-timeout. ghostly reports whether a request went
// unanswered (it may have reached the store, and the store may hold a
// grant of this run's that it never heard of).
func (s *Supervisor) acquireLoop(ctx context.Context, cfg Config, log zerolog.Logger) (_ *leasestore.Lease, _ time.Time, _ Ending, ghostly bool, _ error) {
	req := leasestore.AcquireRequest{
		Job: cfg.Job, Holder: cfg.WorkerID, Host: cfg.Host, PID: cfg.PID, Command: cfg.Command,
		TTL: cfg.TTL, EvidenceTTL: cfg.EvidenceTTL, MaxCrashes: cfg.MaxCrashes, MinInterval: cfg.MinInterval,
		Region: cfg.Region, Deadline: cfg.Deadline, Slots: cfg.Slots, Wait: cfg.Wait,
	}
	// queued: the store put this run in the job's queue of waiters, which
	// it leaves when it gives up waiting.
	queued := false
	giveUp := func() {
		if queued {
			s.leave(cfg, log)
		}
	}
	var sub leasestore.Subscription
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	var released <-chan struct{}
	var timeout <-chan time.Time
	started := s.Clock.Now()
	if cfg.WaitTimeout > 0 {
		t := s.Clock.NewTimer(cfg.WaitTimeout)
		defer t.Stop()
		timeout = t.C()
	}
	for {
		if cfg.Wait && sub == nil {
			// Subscribe before the attempt: a release between a refused
			// attempt and the subscription would otherwise be missed. A
			// subscription refused (a registry at its limit, a store
			// failing) does not stop the attempt: the lease may be free,
			// and a refused attempt still wakes at the holder's expiry.
			var err error
			if sub, err = s.Store.Subscribe(ctx, cfg.Job); err == nil {
				released = sub.Released()
			} else {
				log.Warn().Err(err).Msg("cannot watch for the lease's release; trying it now, and again at the holder's expiry")
			}
		}
		lease, sent, err := s.ask(ctx, cfg, req, log)
		ghostly = ghostly || errors.Is(err, errUnanswered)
		if err == nil {
			if c := lease.Recovered; c != nil {
				log.Warn().Str("crashed_worker", c.Holder).Str("crashed_host", c.Host).Int("crashes", c.Crashes).
					Msg("counted the previous run's crash: its supervisor vanished")
			}
			return lease, sent, Ending{}, ghostly, nil
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
			if s.WatchExit != nil && held.Host == cfg.Host && held.PID > 0 {
				holderExited, stopWatch = s.WatchExit(held.PID)
			}
		case cfg.Wait && errors.Is(err, leasestore.ErrUnavailable):
			log.Warn().Err(err).Msg("the store failed while waiting for the lease; trying again")
			wake = s.retryAfter(cfg.Heartbeat)
		default:
			return nil, time.Time{}, Ending{}, ghostly, err
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
			return nil, time.Time{}, Ending{}, ghostly, &WaitTimeoutError{Waited: s.Clock.Now().Sub(started), Last: err}
		case sig := <-s.Signals:
			retry.Stop()
			stopWatch()
			if ss, ok := sig.(syscall.Signal); ok && endsWait(ss) {
				giveUp()
				log.Info().Str("signal", ss.String()).Msg("signal while waiting for the lease: nothing held, nothing started")
				return nil, time.Time{}, Ending{Reason: Interrupted, Signal: ss, Detail: "interrupted while waiting"}, ghostly, nil
			}
		case <-ctx.Done():
			retry.Stop()
			stopWatch()
			giveUp()
			return nil, time.Time{}, Ending{}, ghostly, ctx.Err()
		}
		retry.Stop()
		stopWatch()
	}
}

// leave takes this run out of the job's queue of waiters when it gives up
// waiting, bounded by --safety. When the store does not answer, the run's
// place lapses within --ttl, as a waiter that died would.
func (s *Supervisor) leave(cfg Config, log zerolog.Logger) {
	q, ok := s.Store.(leasestore.Queuer)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Safety)
	defer cancel()
	if err := q.Leave(ctx, cfg.Job, cfg.WorkerID); err != nil {
		log.Debug().Err(err).Msg("could not leave the job's queue; this run's place lapses within --ttl")
	}
}

// gaveUp is the outcome of this run's grant with token (0: unknown) whose
// answer never arrived: its child never started.
func gaveUp(cfg Config, token int64) leasestore.LateOutcome {
	return leasestore.LateOutcome{Job: cfg.Job, Holder: cfg.WorkerID, Token: token, Outcome: leasestore.Outcome{
		Result: leasestore.ResultNotStarted, ExitCode: -1, Reason: "gave up on the acquire: its answer never arrived"}}
}

// errUnanswered is why an acquire asked acquireAsks times failed.
var errUnanswered = errors.New("no answer")

// acquireAsks is how many times one acquire is asked when the store does
// not answer within --safety. The second ask recovers a grant whose answer
// was lost (Acquire is idempotent for its holder); a store that leaves two
// in a row unanswered is treated as down.
const acquireAsks = 2

// ask sends req, and sends it again if no answer came within --safety: the
// store may have granted the first and lost only its answer, and Acquire
// returns the holder's own live lease (same token, liveness extended) when
// asked again. It returns the lease and the send time of the ask that got
// it, which is what the safety deadline counts from; a refusal on the
// second ask is returned as it is.
func (s *Supervisor) ask(ctx context.Context, cfg Config, req leasestore.AcquireRequest, log zerolog.Logger) (*leasestore.Lease, time.Time, error) {
	for n := 1; ; n++ {
		sent := s.Clock.Now()
		// A grant that arrives after the safety window is useless (the child
		// could not start before its deadline), so that bounds each ask.
		actx, cancel := context.WithTimeout(ctx, cfg.Safety)
		lease, err := s.Store.Acquire(actx, req)
		// Unanswered: a bound passed, this one or the store client's own
		// (a read timeout).
		unanswered := err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || actx.Err() != nil)
		cancel()
		if !unanswered || ctx.Err() != nil {
			return lease, sent, err
		}
		if n == acquireAsks {
			return nil, time.Time{}, &leasestore.UnavailableError{Op: "acquire",
				Err: fmt.Errorf("the store answered neither of two acquires within the safety window (--safety %s, by default --ttl/2, or its client's own timeout): %w", cfg.Safety, errUnanswered)}
		}
		log.Warn().Err(err).Dur("safety", cfg.Safety).Msg("no answer to the acquire within --safety; asking again, which returns the lease if the store granted it")
	}
}

// endsWait reports whether sig, received while waiting for the lease, ends
// the wait (the signals whose default action is to terminate a process; the
// user signals are ignored while nothing runs).
func endsWait(sig syscall.Signal) bool {
	return sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGHUP || sig == syscall.SIGQUIT
}
