package registry

import (
	"errors"
	"net/http"
	"testing"

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

// While two or more subscriptions of a job name their waiter, a release
// reaches only those whose turn it is, and those that name none; when the
// store cannot say whose turn it is, every one.
func TestReleaseWakesTheWaitersInTheirTurn(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, store, nil)
	a := storetest.Acquire(t, store.Store, storetest.Request("j", "a", storetest.LongTTL))
	for _, w := range []string{"b", "c"} {
		req := storetest.Request("j", w, storetest.LongTTL)
		req.Wait = true
		if _, err := store.Store.Acquire(storetest.Ctx(t), req); !errors.As(err, new(*leasestore.HeldError)) {
			t.Fatalf("%s asked for the job a holds: %v", w, err)
		}
	}
	b, c := subscribeAs(t, srv, "j", "b", workerToken), subscribeAs(t, srv, "j", "c", workerToken)
	anyone := subscribe(t, srv, "j", workerToken)
	storetest.Release(t, store.Store, a, leasestore.ResultCompleted)
	store.release("j")
	if !released(t, wait(t, srv, b, workerToken, 10_000)) {
		t.Error("b, first in the queue, was not woken by a's release")
	}
	// Decided with b's: one pass over the job's subscriptions.
	if released(t, wait(t, srv, c, workerToken, 1)) {
		t.Error("c, behind b, was woken by a's release")
	}
	if !released(t, wait(t, srv, anyone, workerToken, 10_000)) {
		t.Error("a subscription naming no waiter missed a's release")
	}
	store.set("status", errors.New("down"), false)
	store.release("j")
	if !released(t, wait(t, srv, c, workerToken, 10_000)) {
		t.Error("c was not woken when the store could not say whose turn it was")
	}
}
