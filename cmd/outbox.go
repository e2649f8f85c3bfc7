package cmd

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/outbox"
)

// hostOutbox returns f's outbox, or nil when f has none.
func (f *Factory) hostOutbox() *outbox.Box {
	if f.Outbox == nil {
		return nil
	}
	return f.Outbox()
}

// deliverOutbox delivers the outcomes box keeps (a nil box keeps none) to
// store within bound, and logs what it did. A
// failure is logged, not returned: the outcomes wait for the next process.
func deliverOutbox(ctx context.Context, box *outbox.Box, store leasestore.Leaser, log zerolog.Logger, bound time.Duration) {
	if box == nil || !box.Pending() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := box.Deliver(ctx, store, log); err != nil {
		log.Warn().Err(err).Str("outbox", box.Dir()).Msg("delivering the late outcomes kept on this host failed; the next run or scan tries again")
	}
}
