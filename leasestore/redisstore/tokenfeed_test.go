package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// A killed pub/sub connection is reported at once, and the watch reads its
// state again when go-redis has re-subscribed, grants made meanwhile
// included.
func TestRedisTokenFeedReportsALostConnection(t *testing.T) {
	srv := ownRedis(t)
	watcher := leasestore.New(openRedis(t, srv.URL, "ns"))
	holder := openRedis(t, srv.URL, "ns")
	log := storetest.Watch(t, watcher, "job")
	first := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
	log.Await(t, "of the first grant", storetest.IsState(first.Token, true))

	if _, err := srv.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	log.Await(t, "lost", func(st leasestore.TokenState) bool { return st.Lost })
	storetest.Release(t, holder, first, leasestore.ResultCompleted)
	second := storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
	log.Await(t, "of the grant made while the connection was lost", storetest.IsState(second.Token, true))
	if err := watcher.SyncTokens(storetest.Ctx(t)); err != nil {
		t.Fatalf("SyncTokens after the connection was re-established: %v", err)
	}
}

// A release published by a leasectl older than the feed carries no token:
// the watch reads the state instead.
func TestRedisTokenFeedReadsOnAnEmptyPayload(t *testing.T) {
	srv := testRedis.Get(t)
	ns := freshNamespace()
	watcher := leasestore.New(openRedis(t, srv.URL, ns))
	holder := openRedis(t, srv.URL, ns)
	l := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
	log := storetest.Watch(t, watcher, "job")
	// The old release script: the lease ends and the channel gets "".
	if _, err := srv.Do("DEL", holder.jobKeys("job")[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("PUBLISH", holder.channel("job"), ""); err != nil {
		t.Fatal(err)
	}
	st := log.Await(t, "read after an empty payload", storetest.IsState(l.Token, false))
	if !st.Read {
		t.Errorf("state %+v after an empty payload, want a read", st)
	}
}

// Waiters share the job's channel with token feeds but are not woken by a
// grant: a new holder is no reason to try again.
func TestRedisSubscriptionIgnoresGrants(t *testing.T) {
	msgs := make(chan any, 3)
	sub := &redisSubscription{released: make(chan struct{}, 1)}
	msgs <- &redis.Message{Payload: grantPrefix + "1767225600000000"}
	close(msgs)
	sub.forward(msgs)
	select {
	case <-sub.Released():
		t.Fatal("a grant woke the waiter")
	default:
	}
	for _, payload := range []string{endPrefix + "1767225600000000", unquarantinePayload, ""} {
		msgs := make(chan any, 1)
		msgs <- &redis.Message{Payload: payload}
		close(msgs)
		sub.forward(msgs)
		select {
		case <-sub.Released():
		default:
			t.Errorf("payload %q did not wake the waiter", payload)
		}
	}
}

// A killed pub/sub connection loses what was published meanwhile: once
// go-redis has subscribed again, the waiter is woken to look for itself,
// as on the other stores, so that a release during a failover costs no
// heartbeat.
func TestRedisSubscriptionWakesAfterALostConnection(t *testing.T) {
	srv := ownRedis(t)
	sub, err := openRedis(t, srv.URL, "ns").Subscribe(storetest.Ctx(t), "job", "b")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := srv.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Released():
	case <-time.After(storetest.HangGuard):
		t.Fatalf("the waiter was not woken within %s of its subscription's lost connection", storetest.HangGuard)
	}
}
