package registry

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/clock/fakeclock"
	"github.com/leasectl/leasectl/registry/api"
)

// subscribe makes a subscription to job with token.
func subscribe(t *testing.T, srv *testServer, job, token string) string {
	t.Helper()
	var sub api.Subscription
	a := request(t, srv.url, http.MethodPost, api.PathSubscribe, token, api.SubscribeRequest{JobID: job})
	if a.status != http.StatusCreated {
		t.Fatalf("subscribe: %d %s", a.status, a.body)
	}
	a.decode(t, &sub)
	if sub.SubscriptionID == "" || sub.JobID != job {
		t.Fatalf("subscription %+v", sub)
	}
	return sub.SubscriptionID
}

// wait long-polls subscription id for up to timeoutMS.
func wait(t *testing.T, srv *testServer, id, token string, timeoutMS int) answer {
	t.Helper()
	return request(t, srv.url, http.MethodGet, api.PathSubscription+id+"?timeout_ms="+strconv.Itoa(timeoutMS), token, nil)
}

func released(t *testing.T, a answer) bool {
	t.Helper()
	var w api.Wait
	a.decode(t, &w)
	return w.Released
}

// A long-poll returns as soon as the job is released, or at its timeout;
// a release between two long-polls is kept for the next one.
func TestLongPoll(t *testing.T) {
	store := newFakeStore(t)
	clock := fakeclock.New(time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC))
	srv := newTestServer(t, store, func(c *Config) { c.Clock = clock })
	id := subscribe(t, srv, "j", workerToken)

	timedOut := make(chan bool, 1)
	go func() { timedOut <- released(t, wait(t, srv, id, workerToken, 100)) }()
	clock.AwaitTimer(t, clock.Now().Add(100*time.Millisecond))
	select {
	case <-timedOut:
		t.Fatal("a 100 ms wait returned before its time passed")
	default:
	}
	clock.Advance(100 * time.Millisecond)
	if <-timedOut {
		t.Error("a wait with no release said released")
	}

	store.release("j") // between two waits
	if !released(t, wait(t, srv, id, workerToken, 10_000)) {
		t.Error("a release before the wait was not kept for it")
	}

	got := make(chan bool, 1)
	go func() { got <- released(t, wait(t, srv, id, workerToken, 20_000)) }()
	// The release must come while the wait is held: retry it until the
	// wait answers, since its arrival cannot be observed from here.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-got:
			if !r {
				t.Error("a wait woken by a release said not released")
			}
			return
		case <-tick.C:
			store.release("j")
		}
	}
}

// Waiters of one job share one store subscription, closed with the last.
func TestSubscriptionsShareTheStoreSubscription(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, store, nil)
	a := subscribe(t, srv, "j", workerToken)
	b := subscribe(t, srv, "j", operatorToken)
	if n := store.count("subscribe"); n != 1 {
		t.Fatalf("%d store subscriptions for two waiters of one job, want 1", n)
	}
	store.release("j")
	if !released(t, wait(t, srv, a, workerToken, 10_000)) || !released(t, wait(t, srv, b, operatorToken, 10_000)) {
		t.Error("a release did not reach both waiters")
	}
	// Another token cannot wait on, or drop, a subscription not its own.
	if e := wait(t, srv, a, operatorToken, 10).err(t); e.Code != api.CodeSubscriptionNotFound {
		t.Errorf("waiting on another token's subscription: %+v", e)
	}
	for _, s := range []struct{ id, token string }{{a, workerToken}, {b, operatorToken}} {
		if r := request(t, srv.url, http.MethodDelete, api.PathSubscription+s.id, s.token, nil); r.status != http.StatusNoContent {
			t.Errorf("unsubscribe: %d %s", r.status, r.body)
		}
	}
	store.mu.Lock()
	sub := store.subscribed[0]
	store.mu.Unlock()
	select {
	case <-sub.closed:
	case <-time.After(10 * time.Second):
		t.Error("the store subscription was not closed with its last waiter")
	}
	if e := wait(t, srv, a, workerToken, 10).err(t); e.Code != api.CodeSubscriptionNotFound {
		t.Errorf("waiting after unsubscribe: %+v", e)
	}
}

// Subscriptions nobody waits on are dropped after subscriptionIdle.
func TestIdleSubscriptionsAreDropped(t *testing.T) {
	clock := fakeclock.New(time.Now())
	srv := newTestServer(t, newFakeStore(t), func(c *Config) { c.Clock = clock })
	id := subscribe(t, srv, "j", workerToken)
	srv.hub.sweep()
	if srv.hub.count() != 1 {
		t.Fatal("a fresh subscription was swept")
	}
	clock.Advance(subscriptionIdle + time.Second)
	srv.hub.sweep()
	if e := wait(t, srv, id, workerToken, 10).err(t); e.Code != api.CodeSubscriptionNotFound {
		t.Errorf("an idle subscription after the sweep: %+v, want it dropped", e)
	}
}

// Draining answers the long-polls in progress at once, so that clients
// subscribe again elsewhere, and fails /healthz.
func TestDrainAnswersLongPolls(t *testing.T) {
	srv := newTestServer(t, newFakeStore(t), nil)
	id := subscribe(t, srv, "j", workerToken)
	got := make(chan answer, 1)
	go func() { got <- wait(t, srv, id, workerToken, 30_000) }()
	drainAnswers(t, srv, got, "long-poll", func() bool { return holdsWait(srv, id) })
	if a := request(t, srv.url, http.MethodGet, api.PathHealth, "", nil); a.status != http.StatusServiceUnavailable {
		t.Errorf("/healthz while draining: %d, want 503", a.status)
	}
}

// holdsWait reports whether a wait on subscription id is in progress.
func holdsWait(srv *testServer, id string) bool {
	srv.hub.mu.Lock()
	defer srv.hub.mu.Unlock()
	s := srv.hub.subs[id]
	return s != nil && s.waiting > 0
}

// One token holds at most maxPerOwner subscriptions, counted per
// subscription (two on one job are two): past it, it is refused with
// too_many_subscriptions naming the limit, while another token still
// subscribes; an unsubscribe makes room again.
func TestSubscriptionsPerToken(t *testing.T) {
	srv := newTestServer(t, newFakeStore(t), nil)
	srv.hub.held.maxPerOwner = 2
	first := subscribe(t, srv, "a", workerToken)
	subscribe(t, srv, "a", workerToken)
	a := request(t, srv.url, http.MethodPost, api.PathSubscribe, workerToken, api.SubscribeRequest{JobID: "b"})
	if e := a.err(t); e.Code != api.CodeTooManySubscriptions || !strings.Contains(e.Message, "2 subscriptions, the limit for one token") {
		t.Errorf("a third subscription of one token: %+v, want %s naming the limit of 2", e, api.CodeTooManySubscriptions)
	}
	subscribe(t, srv, "b", operatorToken)
	if a := request(t, srv.url, http.MethodDelete, api.PathSubscription+first, workerToken, nil); a.status != http.StatusNoContent {
		t.Fatalf("unsubscribe: %d %s", a.status, a.body)
	}
	subscribe(t, srv, "b", workerToken)
}
