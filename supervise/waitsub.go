package supervise

import (
	"sync"

	"github.com/leasectl/leasectl/leasestore"
)

// waitSub is a --wait run's subscription to its job's releases, which the
// run no longer needs once it holds the lease. Its close may take long: the
// embedded store's closes an inotify instance, and the kernel makes that
// wait for it to free the watch (an SRCU grace period), 5 to 15 ms on the
// 2-core machine when no other watcher of the job's file is left: most of
// a handoff (docs/performance.md). So a granted run closes it beside its
// child, once the child is forked: a child forked while the close is under
// way holds the inotify instance until its exec, and its exec would wait
// instead. Run waits for the close before it returns, so that the caller
// never closes the store under it.
type waitSub struct {
	sub     leasestore.Subscription
	closing sync.WaitGroup
}

// closeAside closes the subscription, if one is open, without waiting for
// the close to end.
func (w *waitSub) closeAside() {
	if w.sub == nil {
		return
	}
	sub := w.sub
	w.sub = nil
	w.closing.Go(func() { _ = sub.Close() })
}

// close closes the subscription, if one is open, and waits for every close
// to end.
func (w *waitSub) close() {
	w.closeAside()
	w.closing.Wait()
}
