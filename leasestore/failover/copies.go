package failover

import (
	"context"
	"errors"
	"sync"

	"github.com/leasectl/leasectl/leasestore"
)

// Copies follows the runs whose acquire went out more than once (to several
// endpoints, or again to a primary that went silent), for a store client.
//
// Each copy may be carried out, and one may land late. A copy that lands
// while the run holds its lease gets that lease (Acquire is idempotent for
// its holder); one that lands after the run was refused or released would
// grant a lease nobody runs, counted as a crash once it expired. So once
// the run is refused or released, the holder gives up on its grants
// (RecordLate without a token, as the supervisor does for an acquire it
// never heard answered): the store releases a grant that landed, and
// refuses one that lands later. It costs a request only when a copy went
// out.
type Copies struct {
	store  lateRecorder
	reason string
	runs   sync.Map // key: job NUL holder
}

// lateRecorder is the part of a store (leasestore.Leaser) that gives up on
// a holder's grants.
type lateRecorder interface {
	RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error)
}

// NewCopies returns the Copies of a client of store; reason is the outcome
// reason of the give-ups it records.
func NewCopies(store lateRecorder, reason string) *Copies {
	return &Copies{store: store, reason: reason}
}

func copiesKey(job, holder string) string { return job + "\x00" + holder }

// Acquired follows an acquire of req that went out more than once and
// ended with err: a refused one gives up at once (best effort, within ctx;
// a supervisor gives up on one left unanswered itself), a granted one is
// remembered for its release. A job held by another is the exception: a
// --wait run asks again under the same holder, which giving up would
// refuse for good; a copy that lands later grants that holder the lease its
// next attempt gets back, or, if the run stopped waiting, a lease nobody
// runs, counted as a crash once it expired.
func (c *Copies) Acquired(ctx context.Context, req leasestore.AcquireRequest, err error) {
	if err == nil {
		c.runs.Store(copiesKey(req.Job, req.Holder), struct{}{})
		return
	}
	var held *leasestore.HeldError
	if ctx.Err() == nil && !errors.Is(err, leasestore.ErrUnavailable) && !errors.As(err, &held) {
		c.giveUp(ctx, req.Job, req.Holder)
	}
}

// Released gives up on the grants of l's holder once l was released, if
// its acquire went out more than once.
func (c *Copies) Released(ctx context.Context, l *leasestore.Lease) {
	if _, ok := c.runs.LoadAndDelete(copiesKey(l.Job, l.Holder)); ok {
		c.giveUp(ctx, l.Job, l.Holder)
	}
}

// giveUp records that holder gave up on its grants of job, best effort: if
// it fails, a copy that lands later costs a crash counted for a run that
// never started.
func (c *Copies) giveUp(ctx context.Context, job, holder string) {
	_, _ = c.store.RecordLate(ctx, leasestore.LateOutcome{Job: job, Holder: holder, Outcome: leasestore.Outcome{
		Result: leasestore.ResultNotStarted, ExitCode: -1, Reason: c.reason}})
}
