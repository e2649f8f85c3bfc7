package supervise

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
)

// statusReader is the part of a store's on-call half (leasestore.Operator)
// that withdrawUnheardGrants reads.
type statusReader interface {
	Status(ctx context.Context, job string) (*leasestore.JobStatus, error)
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
// kept in the outbox if the store does not take it. Without the store's
// Status or RecordLate nothing is done.
func (s *Supervisor) withdrawUnheardGrants(cfg Config, lease *leasestore.Lease, asking time.Duration, log zerolog.Logger) {
	sr, ok := s.Store.(statusReader)
	lr, ok2 := s.Store.(leasestore.LateRecorder)
	if !ok || !ok2 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Safety)
	defer cancel()
	st, err := sr.Status(ctx, cfg.Job)
	if err != nil {
		log.Warn().Err(err).Msg("reading the job's history for grants of this run whose answers never arrived failed; a crash counted for one stays counted")
		return
	}
	// The run began asking at least asking before the store took the
	// request that got the lease, which was within --safety of its send.
	since := lease.GrantedAt.Add(-asking - cfg.Safety)
	for _, tok := range unheardGrants(st.History, cfg.WorkerID, lease.Token, since) {
		late := gaveUp(cfg, tok)
		c, err := lr.RecordLate(ctx, late)
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
