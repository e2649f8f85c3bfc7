package pgstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// A waiter listens on its own channel only where the schema's functions
// are of this leasectl's version, which wake waiters in their turn, and
// else on the job's channel, which every version's functions notify: its
// subscription must not wait for notifications those functions never send.
// A schema an older leasectl made is one, until the first call migrates
// it; functions of version 6 beside a _wake_waiters (an older leasectl's
// migration run over a build of this one that woke in turn at version 6)
// are another.
func TestWaiterListensWhereTheFunctionsWakeIt(t *testing.T) {
	srv := testPG.Get(t)
	// woken reports whether a notification on the job's channel wakes a
	// waiter of s.
	woken := func(t *testing.T, s *Store, ns string) bool {
		t.Helper()
		sub, err := s.Subscribe(pgCall(t, storetest.HangGuard), "job", "b")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if _, err := srv.Query("SELECT pg_notify(" + quoteLiteral(channel(ns, "job")) + ", '')"); err != nil {
			t.Fatal(err)
		}
		return wokenWithin(sub, time.Second)
	}
	t.Run("a schema an older leasectl made", func(t *testing.T) {
		loadV4(t, srv)
		s := openPG(t, srv.URL, v4Namespace)
		if !woken(t, s, v4Namespace) {
			t.Error("on a schema at version 4, a release on the job's channel did not wake the waiter")
		}
		migrated(t, srv, v4Namespace)
		if woken(t, s, v4Namespace) {
			t.Error("once migrated, a notification on the job's channel woke a waiter whose turn the functions tell it of")
		}
	})
	t.Run("functions of an older version beside _wake_waiters", func(t *testing.T) {
		ns := freshNamespace()
		migrated(t, srv, ns)
		old := schemaVersion - 1
		execSQL(t, srv, fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s._check_version(p_version integer) RETURNS void
			LANGUAGE plpgsql AS $$ BEGIN IF p_version IS DISTINCT FROM %[2]d THEN
			RAISE EXCEPTION 'at version %[2]d' USING ERRCODE = 'LC001', DETAIL = '%[2]d'; END IF; END $$;
			UPDATE %[1]s.meta SET version = %[2]d`, quoteIdent(ns), old))
		if !woken(t, openPG(t, srv.URL, ns), ns) {
			t.Errorf("with functions of version %d, a release on the job's channel did not wake the waiter", old)
		}
	})
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
