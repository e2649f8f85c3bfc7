package httpstore

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// Timing of a subscription's long-polls. Each wait asks the registry to
// hold it up to pollTimeout, and gives up pollMargin later if no answer
// came (a registry that vanished without closing the connection). After a
// failure the next try comes after a backoff from minBackoff doubling to
// maxBackoff: a restarting registry is found again within a second or two,
// and a registry that is down is not hammered by every waiter.
const (
	pollTimeout  = api.DefaultPollTimeoutMS * time.Millisecond
	pollMargin   = 10 * time.Second
	minBackoff   = 50 * time.Millisecond
	maxBackoff   = 2 * time.Second
	closeTimeout = 2 * time.Second
)

// Subscribe makes a subscription in the registry for waiter and returns
// once it is in place there (the registry's store subscription included),
// so that no later release is missed; see leasestore.Store. A goroutine
// then waits for releases with long-polls until Close.
func (s *Store) Subscribe(ctx context.Context, job, waiter string) (leasestore.Subscription, error) {
	id, err := s.subscribe(ctx, job, waiter)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(context.Background())
	sub := &subscription{store: s, job: job, waiter: waiter, id: id, released: make(chan struct{}, 1), ctx: pctx, cancel: cancel, done: make(chan struct{})}
	go sub.poll()
	return sub, nil
}

// subscribe makes a subscription in the registry for waiter and returns its
// ID. A registry older than waking waiters in turn refuses the unknown
// worker_id field without subscribing; subscribe then asks again without
// it, and leaves it out from then on: the waiter is woken by every release
// of the job, as it was before.
func (s *Store) subscribe(ctx context.Context, job, waiter string) (string, error) {
	if s.noWorkerID.Load() {
		waiter = ""
	}
	id, err := s.subscribeAs(ctx, job, waiter)
	var re *leasestore.RequestError
	if waiter != "" && errors.As(err, &re) && re.Field == "worker_id" {
		s.noWorkerID.Store(true)
		id, err = s.subscribeAs(ctx, job, "")
	}
	return id, err
}

// subscribeAs sends one subscribe request, for waiter ("": the job).
func (s *Store) subscribeAs(ctx context.Context, job, waiter string) (string, error) {
	var r api.Subscription
	err := s.do(ctx, call{op: "subscribe", method: http.MethodPost, path: api.PathSubscribe, body: api.SubscribeRequest{JobID: job, WorkerID: waiter}}, &r)
	return r.SubscriptionID, err
}

// subscription waits for a job's releases through the registry.
type subscription struct {
	store    *Store
	job      string
	waiter   string
	released chan struct{}
	ctx      context.Context // ends with Close
	cancel   context.CancelFunc
	done     chan struct{} // closed when poll returns

	mu sync.Mutex
	id string // the registry's; replaced when the subscription is made again
}

// Released receives a value after a release; values coalesce.
func (sub *subscription) Released() <-chan struct{} { return sub.released }

// Close stops waiting and ends the subscription in the registry (best
// effort, bounded by closeTimeout; the registry drops one nobody waits on
// by itself).
func (sub *subscription) Close() error {
	sub.cancel()
	<-sub.done
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	sub.mu.Lock()
	id := sub.id
	sub.mu.Unlock()
	err := sub.store.do(ctx, call{op: "unsubscribe", method: http.MethodDelete, path: api.PathSubscription + url.PathEscape(id)}, nil)
	var e *api.Error
	if errors.As(err, &e) && e.Code == api.CodeSubscriptionNotFound {
		return nil
	}
	return err
}

// wake delivers one (coalesced) notification.
func (sub *subscription) wake() {
	select {
	case sub.released <- struct{}{}:
	default:
	}
}

// poll waits for releases until Close. When the registry lost the
// subscription (it restarted, or is shutting down), poll makes it again
// and wakes the waiter once, since a release may have come in between.
func (sub *subscription) poll() {
	defer close(sub.done)
	backoff := minBackoff
	q := url.Values{"timeout_ms": {strconv.FormatInt(api.MS(pollTimeout), 10)}}
	for {
		sub.mu.Lock()
		id := sub.id
		sub.mu.Unlock()
		ctx, cancel := context.WithTimeout(sub.ctx, pollTimeout+pollMargin)
		var w api.Wait
		err := sub.store.do(ctx, call{op: "wait", method: http.MethodGet, path: api.PathSubscription + url.PathEscape(id), query: q, single: true}, &w)
		cancel()
		if sub.ctx.Err() != nil {
			return
		}
		var e *api.Error
		switch {
		case err == nil:
			backoff = minBackoff
			if w.Released {
				sub.wake()
			}
			continue
		case errors.As(err, &e) && (e.Code == api.CodeSubscriptionNotFound || e.Code == api.CodeShuttingDown):
			if !sub.resubscribe() {
				return
			}
			sub.wake()
			backoff = minBackoff
			continue
		}
		if !sub.sleep(backoff) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// resubscribe makes the subscription again, retrying with backoff until it
// succeeds (true) or Close (false).
func (sub *subscription) resubscribe() bool {
	backoff := minBackoff
	for {
		ctx, cancel := context.WithTimeout(sub.ctx, pollMargin)
		id, err := sub.store.subscribe(ctx, sub.job, sub.waiter)
		cancel()
		if err == nil {
			sub.mu.Lock()
			sub.id = id
			sub.mu.Unlock()
			return true
		}
		if !sub.sleep(backoff) {
			return false
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// sleep waits d, or until Close (false).
func (sub *subscription) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-sub.ctx.Done():
		return false
	}
}
