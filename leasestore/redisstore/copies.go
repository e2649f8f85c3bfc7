package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore/failover"
)

// A grant or a renewal sent to a primary that went silent (frozen, cut off
// by a firewall that drops packets) gets no answer, and go-redis cannot
// take back a command it wrote: its connection waits until the caller's
// deadline, the end of the safety window. Sentinel or the cluster replace a
// silent primary only after down-after-milliseconds or the node timeout,
// and the request must reach the replacement inside the window. So when a
// request has no answer within failover.HedgeAfter(ctx), the bound the
// other stores hedge with, a copy goes out on a connection of its own that
// finds the primary afresh: a Sentinel client asks its Sentinel as it
// dials; on a cluster the copy goes to every node go-redis knows, since its
// slot map still names the silent owner (every node but the slot's owner
// refuses it with a redirection, unrun). The first answer counts. A copy
// that reaches the same silent primary waits with the first, and is carried
// out when that primary wakes up, or thrown away with its data once it
// rejoins as a replica of its replacement.
//
// Only grants and renewals are copied: a renewal of the caller's own lease
// is harmless twice, and so is an acquire while its holder's lease is live
// (the script gives the holder its lease back, renewed); once the run was
// refused or released, its holder gives up on the grants a late copy would
// make (failover.Copies). A release or a late outcome waits on its
// connection: they have no window to keep.

// The spacing of the copies: the wait before each next one is twice the
// last, up to maxCopyWait. Copies at bound, 3·bound, 7·bound... after the
// request (HedgeAfter is a quarter of the window at most), then every
// maxCopyWait, reach a replacement that came late in the window, as late as
// after Sentinel's default 30 s down-after in a window that long, at most
// maxCopyWait after the promotion once the spacing reached it, without a
// copy for every bound on a primary that stays silent. A copy gives up once
// the second copy after it went out (a silent primary would hold its
// connection until the caller's deadline): the request, one copy still
// waiting and the newest hold three connections at most, within the pool's
// poolSize.
const (
	copySpacing = 2
	maxCopyWait = 2 * time.Second
)

// maxResends bounds how often an answer that the request got none (a
// connection refused, say) is sent again at once, when no other copy is
// pending; past it, that answer is returned and the caller retries on its
// own terms.
const maxResends = 3

// sendFunc sends a request through node, or through the Store's client
// (routed by go-redis) when node is nil.
type sendFunc func(ctx context.Context, node *redis.Client) (any, error)

// copied sends a request with send and, while it has no answer, copies of
// it as described above, on contexts cancelled once copied returns (the
// request's ends with ctx's deadline, each copy's sooner). It returns the
// first answer that neither says the request got no answer (movesOn: one
// is sent again at once when no other is pending, up to maxResends times)
// nor that the deployment cannot serve for now (notYet: the next copy goes
// out when due), and how many went out; past maxResends, or once ctx ended
// with none pending, the last of those answers.
func (s *Store) copied(ctx context.Context, send sendFunc) (any, int, error) {
	type answer struct {
		v   any
		err error
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// An answer goes to answers until copied returned (quit): not until
	// cctx ends, which it does with ctx, while copied still waits for it.
	answers, quit := make(chan answer), make(chan struct{})
	defer close(quit)
	wait := failover.HedgeAfter(ctx)
	sent, pending, resent := 0, 0, 0
	out := func() {
		first := sent == 0
		sent++
		pending++
		next := min(wait*copySpacing, maxCopyWait)
		life := next + min(next*copySpacing, maxCopyWait)
		go func() {
			var a answer
			if first {
				a.v, a.err = send(cctx, nil)
			} else {
				c, cancel := context.WithTimeout(cctx, life)
				defer cancel()
				a.v, a.err = s.sendCopy(c, send)
			}
			select {
			case answers <- a:
			case <-quit:
			}
		}()
	}
	tick := time.NewTimer(wait)
	defer tick.Stop()
	out()
	var last answer
	done := ctx.Done()
	for {
		select {
		case last = <-answers:
			pending--
			if last.err == nil || ctx.Err() != nil || !movesOn(last.err) && !notYet(last.err) {
				return last.v, sent, last.err
			}
			switch {
			case pending > 0, notYet(last.err):
			case resent == maxResends:
				return last.v, sent, last.err
			default:
				resent++
				out()
			}
		case <-tick.C:
			if ctx.Err() == nil {
				out()
				wait = min(wait*copySpacing, maxCopyWait)
				tick.Reset(wait)
			}
		case <-done:
			if pending == 0 {
				return last.v, sent, last.err
			}
			done = nil // the pending ones answer at the deadline
		}
	}
}

// sendCopy sends a copy: through the Store's client, which dials afresh
// (and on a cluster without a slot map yet asks a seed picked afresh for
// it) and, on a cluster, to every node the client knows as well, whose
// first answer that is not a redirection, a broken connection or a refusal
// for now counts; else the first of those that is not a redirection.
func (s *Store) sendCopy(ctx context.Context, send sendFunc) (any, error) {
	c, ok := s.rdb.(*redis.ClusterClient)
	if !ok || s.nodes == nil {
		return send(ctx, nil)
	}
	// The next calls go where go-redis's reloaded slot map says.
	c.ReloadState(context.Background())
	nodes := append(s.nodes.all(), nil)
	type answer struct {
		v   any
		err error
	}
	answers := make(chan answer, len(nodes))
	for _, n := range nodes {
		go func() {
			v, err := send(ctx, n)
			answers <- answer{v, err}
		}()
	}
	var first error
	for range nodes {
		a := <-answers
		if a.err == nil || !redirected(a.err) && !movesOn(a.err) && !notYet(a.err) {
			return a.v, a.err
		}
		if first == nil || redirected(first) {
			first = a.err
		}
	}
	return nil, first
}

// movesOn reports whether err says the request got no answer where it
// went, rather than an answer: a connection that broke or was never made
// (a dial bounded on its own, which ends before the caller's deadline), or
// a primary that was made a replica. The request was not carried out
// there, or its answer is lost, and a connection dialed afresh may reach
// the primary. copied takes it for an answer once the caller's deadline
// passed.
func movesOn(err error) bool {
	var netErr net.Error
	return redis.IsReadOnlyError(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &netErr) || errors.Is(err, net.ErrClosed) || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// notYet reports whether err says the deployment cannot serve the request
// for now and did not run it: a cluster that deems a primary failed and
// has not promoted its replica yet (CLUSTERDOWN), or a slot being moved
// (TRYAGAIN), a server still loading its data (LOADING), a replica whose
// primary is down (MASTERDOWN).
func notYet(err error) bool {
	return redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsLoadingError(err) ||
		redis.HasErrorPrefix(err, "MASTERDOWN")
}

// redirected reports whether a cluster node refused a request as not its
// slot's owner (MOVED, ASK): it did not run it.
func redirected(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}
