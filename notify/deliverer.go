package notify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/clock"
	"github.com/leasectl/leasectl/leasestore"
)

// Defaults of a Deliverer.
const (
	// DefaultTimeout bounds one delivery to one sink: a hung sink delays
	// the notices behind it by this much, never the scan loop.
	DefaultTimeout = 10 * time.Second
	// DefaultBatch is how many notices one claim takes. Their claim holds
	// while each is sent to every sink, so more makes a longer hold (a
	// reaper that dies holds them longer from the others).
	DefaultBatch = 20
	// DefaultBackoff and DefaultMaxBackoff are the first retry delay of a
	// notice a sink refused and the longest: doubling from a few seconds
	// rides out a restarting receiver at once, and a ten-minute ceiling
	// retries a sink down for hours about six times an hour, not
	// thousands.
	DefaultBackoff    = 5 * time.Second
	DefaultMaxBackoff = 10 * time.Minute
)

// Deliverer sends the store's due notices to its sinks.
type Deliverer struct {
	Store leasestore.Notices
	Sinks []Sink
	// Owner names this reaper in its claims: unique per process (host and
	// pid), so that two reapers never hold one claim.
	Owner string
	// Namespace is the events' namespace field.
	Namespace string
	// Timeout bounds each delivery to one sink; 0: DefaultTimeout.
	Timeout time.Duration
	// Batch is how many notices one claim takes; 0: DefaultBatch.
	Batch int
	// Backoff and MaxBackoff bound the retry delays; 0: the defaults.
	Backoff, MaxBackoff time.Duration
	// Clock times the passes; nil: the system clock.
	Clock clock.Clock
	// Log receives a line per failed delivery and per failed pass.
	Log zerolog.Logger

	kickOnce sync.Once
	kick     chan struct{}
}

// Kick asks Run for a pass now: the reaper put notices. It never blocks.
func (d *Deliverer) Kick() {
	select {
	case d.kicks() <- struct{}{}:
	default:
	}
}

func (d *Deliverer) kicks() chan struct{} {
	d.kickOnce.Do(func() { d.kick = make(chan struct{}, 1) })
	return d.kick
}

func (d *Deliverer) clock() clock.Clock {
	if d.Clock == nil {
		return clock.Real{}
	}
	return d.Clock
}

// Run delivers due notices every interval, and at once after Kick, until
// ctx ends.
func (d *Deliverer) Run(ctx context.Context, interval time.Duration) {
	t := d.clock().NewTicker(interval)
	defer t.Stop()
	kicks := d.kicks()
	for {
		if err := d.Pass(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn().Err(err).Msg("delivering notices failed; trying again at the next interval")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-kicks:
		}
	}
}

// Pass claims due notices and delivers them, batch after batch, until none
// is due or a sink failed. A notice a sink refused is settled to be retried
// after its backoff; Pass returns the store's failure, not the sinks'.
func (d *Deliverer) Pass(ctx context.Context) error {
	for {
		batch := d.Batch
		if batch <= 0 {
			batch = DefaultBatch
		}
		timeout := d.timeout()
		hold := time.Duration(batch*max(len(d.Sinks), 1))*timeout + timeout
		list, err := d.Store.ClaimNotices(ctx, d.Owner, batch, hold)
		if err != nil {
			return err
		}
		failed := false
		for _, n := range list {
			sent, err := d.deliver(ctx, n)
			if err != nil {
				return err
			}
			failed = failed || !sent
		}
		if len(list) < batch || failed {
			return nil // a sink failing is tried again at the next pass
		}
	}
}

func (d *Deliverer) timeout() time.Duration {
	if d.Timeout <= 0 {
		return DefaultTimeout
	}
	return d.Timeout
}

// deliver sends n to each sink that has not taken it yet, whatever the
// others do, and settles it: sent once every sink took it, and the sinks
// that took it now kept, so that a retry goes to the others alone. It
// reports whether every sink took it.
func (d *Deliverer) deliver(ctx context.Context, n leasestore.Notice) (bool, error) {
	e := EventOf(n, d.Namespace)
	var s leasestore.Settlement
	var failed []string
	for _, sink := range d.Sinks {
		if slices.Contains(n.SentTo, sink.ID()) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, d.timeout())
		err := sink.Send(sctx, e)
		cancel()
		if ctx.Err() != nil {
			return false, ctx.Err() // the claim lapses; another pass sends it
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", sink, err))
			continue
		}
		s.SentTo = append(s.SentTo, sink.ID())
	}
	s.Sent = len(failed) == 0
	if !s.Sent {
		s.RetryIn, s.Error = Backoff(n.Attempts, d.Backoff, d.MaxBackoff, rand.Float64()), strings.Join(failed, "; ")
		d.Log.Warn().Str("error", s.Error).Str("job", n.Job).Str("notice", n.Key).Int("attempt", n.Attempts).
			Dur("retry_in", s.RetryIn).Msg("a sink did not take the notice; retrying it later for the sinks that did not")
	}
	err := d.Store.SettleNotice(ctx, n.Key, d.Owner, s)
	if errors.Is(err, leasestore.ErrNoticeNotHeld) {
		d.Log.Info().Str("notice", n.Key).Msg("the notice's claim was taken over by another reaper before it was settled")
		return s.Sent, nil
	}
	return s.Sent, err
}

// Backoff is the delay before the next attempt of a notice tried attempts
// times: base doubled per attempt after the first, at most ceiling, of
// which a random part (jitter in [0, 1)) up to a half is taken off, so
// that the notices of one outage do not all come back at once. Zero base
// and ceiling are the defaults.
func Backoff(attempts int, base, ceiling time.Duration, jitter float64) time.Duration {
	if base <= 0 {
		base = DefaultBackoff
	}
	if ceiling <= 0 {
		ceiling = DefaultMaxBackoff
	}
	d := base
	for i := 1; i < attempts && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	return d - time.Duration(jitter*float64(d)/2)
}
