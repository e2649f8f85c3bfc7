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

// tokenClockSkew is how far a store's clock may be behind this host's for
// withdrawUnheardGrants to know a grant made since the run began asking.
const tokenClockSkew = time.Minute

// withdrawUnheardGrants runs once a run that got its lease (token) after an
// unanswered request has released it. Such a request may have been granted
// all the same; if the grant expired before the run asked again, whoever
// acquired next (this run, or another waiter) counted it as a crash, of a
// run that never started. The run never learned that grant's token, but
// the job's history names it: a crash counted for this run's holder under
// another token, not corrected yet, and granted since the run began asking
// (a token is never below the store's clock in µs: at least began, less
// tokenClockSkew; an earlier run that used the same --worker-id is older).
// Each is recorded late as not started, which withdraws it, or kept in the
// outbox if the store does not take it. Without the store's Status or
// RecordLate, or if the history cannot be read, nothing is done.
func (s *Supervisor) withdrawUnheardGrants(cfg Config, token int64, began time.Time, log zerolog.Logger) {
	sr, ok := s.Store.(statusReader)
	lr, ok2 := s.Store.(leasestore.LateRecorder)
	if !ok || !ok2 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Safety)
	defer cancel()
	st, err := sr.Status(ctx, cfg.Job)
	if err != nil {
		log.Debug().Err(err).Msg("reading the job's history for grants of this run whose answers never arrived failed")
		return
	}
	for _, tok := range unheardGrants(st.History, cfg.WorkerID, token, began.Add(-tokenClockSkew).UnixMicro()) {
		late := gaveUp(cfg, tok)
		c, err := lr.RecordLate(ctx, late)
		if err != nil {
			s.keep(log, late, err)
			continue
		}
		log.Warn().Int64("crashed_token", tok).Bool("crash_withdrawn", c.CrashWithdrawn).Int("crashes", c.Crashes).
			Msg("a grant of this run whose answer never arrived was counted as a crash once it expired; recorded as not started: " + c.String())
	}
}

// unheardGrants returns the tokens, other than token and not below floor,
// of holder's runs that history says were counted as crashes, and whose
// outcome no late-outcome event recorded since.
func unheardGrants(history []leasestore.Event, holder string, token, floor int64) []int64 {
	var tokens []int64
	for i, e := range history {
		if e.Kind != leasestore.EventCrashed || e.Worker != holder || e.Token == token || e.Token < floor {
			continue
		}
		corrected := false
		for _, later := range history[i+1:] {
			if later.Kind == leasestore.EventLateOutcome && later.Worker == holder && later.Token == e.Token {
				corrected = true
			}
		}
		if !corrected {
			tokens = append(tokens, e.Token)
		}
	}
	return tokens
}
