package registry

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
	"github.com/leasectl/leasectl/registry/api"
)

// subscribeAs makes a subscription to job for waiter with token.
func subscribeAs(t *testing.T, srv *testServer, job, waiter, token string) string {
	t.Helper()
	var sub api.Subscription
	a := request(t, srv.url, http.MethodPost, api.PathSubscribe, token, api.SubscribeRequest{JobID: job, WorkerID: waiter})
	if a.status != http.StatusCreated {
		t.Fatalf("subscribe: %d %s", a.status, a.body)
	}
	a.decode(t, &sub)
	return sub.SubscriptionID
}

// quietGuard is how long a waiter whose turn has not come is watched for a
// wake-up it must not get.
const quietGuard = 200 * time.Millisecond

// queued makes a hold job j and waiters wait behind a, in order, in
// store, and returns a's lease.
func queued(t *testing.T, store *fakeStore, waiters ...string) *leasestore.Lease {
	t.Helper()
	a := storetest.Acquire(t, store.Driver, storetest.Request("j", "a", storetest.LongTTL))
	for _, w := range waiters {
		req := storetest.Request("j", w, storetest.LongTTL)
		req.Wait = true
		if _, err := store.Driver.Acquire(storetest.Ctx(t), req); !errors.As(err, new(*leasestore.HeldError)) {
			t.Fatalf("%s asked for the job a holds: %v", w, err)
		}
	}
	return a
}

// While two or more subscriptions of a job name their waiter, a release
// reaches only those whose turn it is, and those that name none; when the
// store cannot say whose turn it is, every one.
func TestReleaseWakesTheWaitersInTheirTurn(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, store, nil)
	a := queued(t, store, "b", "c", "d")
	b, c, d := subscribeAs(t, srv, "j", "b", workerToken), subscribeAs(t, srv, "j", "c", workerToken), subscribeAs(t, srv, "j", "d", workerToken)
	anyone := subscribe(t, srv, "j", workerToken)
	storetest.Release(t, store.Driver, a, leasestore.ResultCompleted)
	store.release("j")
	if !released(t, wait(t, srv, b, workerToken, 10_000)) {
		t.Error("b, first in the queue, was not woken by a's release")
	}
	// d's turn, if it came, comes with the store's answer, as late as c's.
	if !released(t, wait(t, srv, anyone, workerToken, 10_000)) {
		t.Error("a subscription naming no waiter missed a's release")
	}
	// c's and d's wake-ups would come with the store's answer, after b's
	// and anyone's: an absence, which no event marks, so it is a wait.
	time.Sleep(quietGuard)
	for w, id := range map[string]string{"c": c, "d": d} {
		if released(t, wait(t, srv, id, workerToken, 1)) {
			t.Errorf("%s, behind b, was woken by a's release", w)
		}
	}
	store.set("status", errors.New("down"), false)
	store.release("j")
	if !released(t, wait(t, srv, c, workerToken, 10_000)) {
		t.Error("c was not woken when the store could not say whose turn it was")
	}
}

// The waiter whose turn it is is woken even when another's subscription is
// older: the first waits for no one's but the store's answer.
func TestReleaseWakesTheWaiterInTurnWhateverTheOrderOfSubscriptions(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, store, nil)
	a := queued(t, store, "b", "c")
	subscribeAs(t, srv, "j", "c", workerToken)
	b := subscribeAs(t, srv, "j", "b", workerToken)
	storetest.Release(t, store.Driver, a, leasestore.ResultCompleted)
	store.release("j")
	if !released(t, wait(t, srv, b, workerToken, 10_000)) {
		t.Error("b, first in the queue, was not woken because c subscribed before it")
	}
}
