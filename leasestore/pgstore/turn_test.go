package pgstore

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// A waiter listens on its own channel where the schema's functions wake
// waiters in their turn, and on the job's channel, which every release
// notifies, where a leasectl older than that installed them: its
// subscription must not wait for notifications those functions never send.
func TestWaiterListensWhereTheFunctionsWakeIt(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	s := openPG(t, srv.URL, ns)
	storetest.Acquire(t, s, storetest.Request("job", "a", storetest.LongTTL)) // migrates
	notifyJob := "SELECT pg_notify(" + quoteLiteral(channel(ns, "job")) + ", '')"
	woken := func(waiter string) bool {
		t.Helper()
		sub, err := s.Subscribe(pgCall(t, storetest.HangGuard), "job", waiter)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if _, err := srv.Query(notifyJob); err != nil {
			t.Fatal(err)
		}
		return wokenWithin(sub, time.Second)
	}
	if woken("b") {
		t.Error("a notification on the job's channel woke a waiter whose turn the functions tell it of")
	}
	if _, err := srv.Query("DROP FUNCTION " + quoteIdent(schemaName(ns)) + "._wake_waiters(text, timestamptz)"); err != nil {
		t.Fatal(err)
	}
	if !woken("b") {
		t.Error("with functions that do not wake waiters in their turn, a release on the job's channel did not wake the waiter")
	}
}

// wokenWithin reports whether sub is woken within d.
func wokenWithin(sub leasestore.Subscription, d time.Duration) bool {
	select {
	case <-sub.Released():
		return true
	case <-time.After(d):
		return false
	}
}
