package failover

import (
	"context"
	"time"
)

// The hedge bound: how long an attempt may go unanswered before the request
// goes to the next endpoint as well. It is a quarter of the time the
// caller's context leaves, within [minHedge, maxHedge].
//
// The supervisor bounds a renewal by the time left in its safety window,
// --safety − --heartbeat when it goes out on time (--ttl/6 by default), and
// an acquire by --safety. A quarter of that sends a renewal whose member
// went silent to the second member a quarter into the window and, if that
// one is silent too, to the third at half of it, leaving the last half for
// that attempt and for the retries the supervisor makes after a failure.
// The bound is the same for every request of a call sequence, and the
// endpoint that missed it is tried last by the next request, so a renewal
// of two requests pays it once.
//
// maxHedge caps it for long windows (--ttl 30s leaves a renewal 5 s, an
// acquire 15 s): a healthy etcd member or registry answers a read in
// milliseconds and a write in one consensus round with a disk sync (tens of
// ms on a loaded host), so an endpoint silent for 500 ms, five of etcd's
// default heartbeats and half its election timeout, is not worth waiting
// on; a new run then starts within about half a second of a member going
// silent. minHedge keeps a tiny window (a safety barely above the
// heartbeat) from hedging every request of a healthy, loaded store: below
// it a second copy only doubles the load.
const (
	hedgeShare = 4
	maxHedge   = 500 * time.Millisecond
	minHedge   = 20 * time.Millisecond
)

// HedgeAfter is the hedge bound of a call made with ctx.
func HedgeAfter(ctx context.Context) time.Duration {
	d := maxHedge
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)/hedgeShare)
	}
	return max(d, minHedge)
}

// Attempt sends a call's request to the endpoint named name and returns its
// answer; ctx ends when the call has its answer elsewhere.
type Attempt[T any] func(ctx context.Context, name string) (T, error)

// Do sends a request to the endpoints in e's order (Order), one attempt
// each at most: to the next when the last one sent has not answered within
// HedgeAfter(ctx), or failed with an error moveOn accepts (the endpoint
// broke the connection or said it cannot serve), and returns the first
// answer: a result, or an error moveOn refuses. When every attempt failed
// it returns the first failure. The attempts still running are cancelled
// before it returns. The request must be one the store may receive twice,
// late (see the package doc).
func Do[T any](ctx context.Context, e *Endpoints, attempt Attempt[T], moveOn func(error) bool) (T, error) {
	type answer struct {
		i   int
		v   T
		err error
	}
	order := e.Order()
	if len(order) == 1 {
		// Nothing to hedge to: the attempt runs on the caller's goroutine,
		// without the timer, channel and goroutine of a hedged call, which
		// a heartbeat through one registry pays on every renewal.
		return attempt(ctx, e.names[order[0]])
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(order))
	sent, pending := 0, 0
	lastAnswered := false // the attempt sent last answered (with a failure)
	send := func() {
		i := order[sent]
		sent++
		pending++
		lastAnswered = false
		go func() {
			v, err := attempt(actx, e.names[i])
			answers <- answer{i, v, err}
		}()
	}
	bound := HedgeAfter(ctx)
	hedge := time.NewTimer(bound)
	defer hedge.Stop()
	send()
	var first error
	for {
		select {
		case a := <-answers:
			pending--
			lastAnswered = lastAnswered || a.i == order[sent-1]
			// An attempt the caller's deadline cut short gave no answer.
			if a.err == nil || !moveOn(a.err) && ctx.Err() == nil {
				e.Answered(a.i)
				return a.v, a.err
			}
			e.Failed(a.i)
			if first == nil {
				first = a.err
			}
			if sent < len(order) && ctx.Err() == nil {
				send()
				hedge.Reset(bound)
			} else if pending == 0 {
				var zero T
				return zero, first
			}
		case <-hedge.C:
			if lastAnswered || ctx.Err() != nil {
				continue
			}
			// The attempt sent last is silent past the bound, and so is
			// every one sent before it.
			e.Silent(order[sent-1])
			if sent < len(order) {
				send()
				hedge.Reset(bound)
			}
		}
	}
}
