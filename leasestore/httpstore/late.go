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
