package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

// An acquire whose answer never arrived may have been granted all the
// same. This file is everything the supervisor does about that: it asks
// again within --safety, which returns the grant if there was one (ask);
// when it gives up, it tells the store, which releases such a grant or
// withdraws the crash counted for it (abandon); and when a later ask got
// the lease, it withdraws the crashes counted for the grants it never
// heard of (withdrawUnheardGrants).

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

// abandon tells the store that this run gave up on a grant it never heard
// of, bounded by --safety, or keeps that in the outbox.
func (s *Supervisor) abandon(cfg Config, log zerolog.Logger) {
	late := gaveUp(cfg, 0)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Safety)
	defer cancel()
	c, err := s.Store.RecordLate(ctx, late)
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

// withdrawUnheardGrants runs once a run that got lease after an unanswered
// request has ended, having asked for asking before the request that got
// it was sent. An unanswered request may have been granted all the same;
// if that grant expired before the run asked again, whoever acquired next
// (this run, or another waiter) counted it as a crash, of a run that never
// started. The run never learned that grant's token, but the job's history
// names it: a crash of this run's worker ID under a token below the
// lease's (a grant still live when the run asked again would have been
// handed back as its lease), acquired since the run began asking. That is
// told by the store's own clock, or the acquiring host's on etcd, which
// stamped both that grant and this lease (GrantedAt): so no run of the same
// --worker-id from before can be taken for it. Each such crash not
// corrected yet is recorded late as not started, which withdraws it, or
// kept in the outbox if the store does not take it.
func (s *Supervisor) withdrawUnheardGrants(cfg Config, lease *leasestore.Lease, asking time.Duration, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Safety)
	defer cancel()
	st, err := s.Store.Status(ctx, cfg.Job)
	if err != nil {
		log.Warn().Err(err).Msg("reading the job's history for grants of this run whose answers never arrived failed; a crash counted for one stays counted")
		return
	}
	// The run began asking at least asking before the store took the
	// request that got the lease, which was within --safety of its send.
	since := lease.GrantedAt.Add(-asking - cfg.Safety)
	for _, tok := range unheardGrants(st.History, cfg.WorkerID, lease.Token, since) {
		late := gaveUp(cfg, tok)
		c, err := s.Store.RecordLate(ctx, late)
		if err != nil {
			if s.Outbox == nil || s.Outbox.Put(late) != nil {
				log.Warn().Err(err).Int64("crashed_token", tok).
					Msg("a grant of this run whose answer never arrived was counted as a crash; recording it as not started failed, and it stays counted")
				continue
			}
			log.Warn().Err(err).Int64("crashed_token", tok).Str("outbox", s.Outbox.Dir()).
				Msg("a grant of this run whose answer never arrived was counted as a crash; recording it as not started failed, so it is kept in the outbox, which the next leasectl run or scan on this host delivers")
			continue
		}
		ev := log.Info()
		if c.CrashWithdrawn {
			ev = log.Warn()
		}
		ev.Int64("crashed_token", tok).Bool("crash_withdrawn", c.CrashWithdrawn).Int("crashes", c.Crashes).
			Msg("a grant of this run whose answer never arrived was counted as a crash once it expired; recorded as not started: " + c.String())
	}
}

// unheardGrants returns the tokens below token of holder's runs that
// history says were acquired at or after since and then counted as
// crashes, and whose outcome no late-outcome event recorded since.
func unheardGrants(history []leasestore.Event, holder string, token int64, since time.Time) []int64 {
	acquired := map[int64]time.Time{}
	var tokens []int64
	for _, e := range history {
		if e.Worker != holder || e.Token >= token {
			continue
		}
		switch e.Kind {
		case leasestore.EventAcquired:
			acquired[e.Token] = e.At
		case leasestore.EventCrashed:
			at, ok := acquired[e.Token]
			if ok && !at.Before(since) && !leasestore.LateRecorded(history, holder, e.Token) {
				tokens = append(tokens, e.Token)
			}
		}
	}
	return tokens
}
