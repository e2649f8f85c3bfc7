package httpstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// ErrNoLateOutcomes is the cause of RecordLate's error when an older
// registry says that its store does not record late outcomes. The error also matches
// leasestore.ErrUnavailable, so that the outbox keeps the outcome and a
// later delivery, through a registry in front of a store that does, records
// it.
var ErrNoLateOutcomes = errors.New("the store behind the registry does not record late outcomes")

// RecordLate records the outcome of a run that did not reach the store in
// time; see leasestore.Leaser. It is one call of the store's
// RecordLate in the registry, and idempotent as that is: a second delivery
// changes nothing and answers a Correction with nothing set. Unlike
// Release, its Idempotency-Key is not derived from the outcome but fresh
// for each call: it lets the HTTP transport send the request again on a
// fresh connection (the registry then answers what the first one did),
// while a later delivery of the same outcome is answered by the store
// afresh, with what it changed then (nothing), as the contract says.
func (s *Store) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	var c api.Correction
	err := s.do(ctx, call{op: "record late outcome", method: http.MethodPost, path: api.PathRecordLate,
		body: api.FromLateOutcome(late), key: randomKey()}, &c)
	var e *api.Error
	if errors.As(err, &e) && e.Code == api.CodeNoLateOutcomes {
		return leasestore.Correction{}, &leasestore.UnavailableError{Op: "record late outcome",
			Err: fmt.Errorf("registry %s: %w", s.display, ErrNoLateOutcomes)}
	}
	if err != nil {
		return leasestore.Correction{}, err
	}
	return c.ToStore(), nil
}

// An acquire sent to more than one registry (failover.Do) may be carried
// out by each, and a copy may land late: a registry refuses one that
// arrives after its sender's deadline when it can tell (api.HeaderDeadline),
// but not one sent before the client had read that registry's clock, nor
// one that arrives in time after the run already ended. A copy that lands
// while the run holds its lease gets that lease (Acquire is idempotent for
// its holder); one that lands after the run was refused or released would
// grant a lease nobody runs, counted as a crash once it expired. So once
// the run is refused or released, the holder gives up on its grant
// (RecordLate without a token, as the supervisor does for an acquire it
// never heard answered): the store releases a grant that landed, and
// refuses one that lands later. It costs a request only when a copy went
// out.

// copiedKey names a run in Store.copied.
func copiedKey(job, holder string) string { return job + "\x00" + holder }

// copiedAcquire follows an acquire of req sent to more than one registry,
// which ended with err: a refused one gives up at once (best effort,
// within ctx; a supervisor gives up on one left unanswered itself), a
// granted one is remembered for its release. A job held by another is the
// exception: a --wait run asks again under the same holder, which giving
// up would refuse for good; a copy that lands later grants that holder the
// lease its next attempt gets back, or, if the run stopped waiting, a lease
// nobody runs, counted as a crash once it expired.
func (s *Store) copiedAcquire(ctx context.Context, req leasestore.AcquireRequest, err error) {
	if err == nil {
		s.copied.Store(copiedKey(req.Job, req.Holder), struct{}{})
		return
	}
	var held *leasestore.HeldError
	if ctx.Err() == nil && !errors.Is(err, leasestore.ErrUnavailable) && !errors.As(err, &held) {
		s.giveUp(ctx, req.Job, req.Holder)
	}
}

// releasedCopied gives up on the grants of l's holder once l was released,
// if its acquire went to more than one registry.
func (s *Store) releasedCopied(ctx context.Context, l *leasestore.Lease) {
	if _, ok := s.copied.LoadAndDelete(copiedKey(l.Job, l.Holder)); ok {
		s.giveUp(ctx, l.Job, l.Holder)
	}
}

// giveUp records that holder gave up on its grants of job, best effort: if
// it fails, a copy that lands later costs a crash counted for a run that
// never started.
func (s *Store) giveUp(ctx context.Context, job, holder string) {
	_, _ = s.RecordLate(ctx, leasestore.LateOutcome{Job: job, Holder: holder, Outcome: leasestore.Outcome{
		Result: leasestore.ResultNotStarted, ExitCode: -1, Reason: "gave up on the copies of its acquire sent to other registries"}})
}
