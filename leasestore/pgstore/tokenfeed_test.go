package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// A feed whose connection is terminated tells its watches, and reads their
// states again once it has reconnected: a grant made while it was down
// reaches them by that read.
func TestTokenFeedReadsAgainAfterALostConnection(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	watcher := leasestore.New(openPG(t, withApp(srv.URL, ns), ns))
	holder := openPG(t, srv.URL, ns)
	log := storetest.Watch(t, watcher, "job")
	first := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
	log.Await(t, "of the first grant", storetest.IsState(first.Token, true))

	if n := terminate(t, srv, ns); n == 0 {
		t.Fatal("terminated no backend of the watcher")
	}
	log.Await(t, "lost", func(st leasestore.TokenState) bool { return st.Lost })
	storetest.Release(t, holder, first, leasestore.ResultCompleted)
	next := storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
	st := log.Await(t, "of the grant made meanwhile", storetest.IsState(next.Token, true))
	if !st.Read {
		// The grant's NOTIFY may also have reached the new connection,
		// but a read must come first: what was sent meanwhile is lost.
		var read bool
		for _, s := range log.States() {
			read = read || s.Read && s.Token >= first.Token
		}
		if !read {
			t.Errorf("no read after the reconnection: %+v", log.States())
		}
	}
	if err := watcher.SyncTokens(pgCall(t, storetest.HangGuard)); err != nil {
		t.Fatalf("SyncTokens after the reconnection: %v", err)
	}
}

// SyncTokens returns only once the changes before it have reached their
// fns and the fns have returned: here fns slow enough that the changes
// queue up on the feed's connection, and the feed's lock does not make up
// for a heartbeat that does not wait for its marker.
func TestSyncTokensWaitsForQueuedChanges(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	watcher, holder := leasestore.New(openPG(t, srv.URL, ns)), openPG(t, srv.URL, ns)
	log := storetest.NewTokenLog()
	w, err := watcher.WatchTokens(pgCall(t, storetest.HangGuard), "job", func(st leasestore.TokenState) {
		if !st.Read {
			time.Sleep(20 * time.Millisecond)
		}
		log.Add(st)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var l *leasestore.Lease
	for i := range 10 {
		l = storetest.Acquire(t, holder, storetest.Request("job", fmt.Sprintf("w%d", i), storetest.LongTTL))
		storetest.Release(t, holder, l, leasestore.ResultCompleted)
	}
	if err := watcher.SyncTokens(pgCall(t, storetest.HangGuard)); err != nil {
		t.Fatalf("SyncTokens: %v", err)
	}
	if st, _ := log.Last(); !storetest.IsState(l.Token, false)(st) {
		t.Fatalf("after SyncTokens the newest state is %+v, want the last release, of %d; %d states so far",
			st, l.Token, len(log.States()))
	}
}

// A heartbeat that cannot be shown in time fails with ErrUnavailable: here
// the server is frozen.
func TestSyncTokensFailsWhenTheMarkerDoesNotComeBack(t *testing.T) {
	srv := ownPG(t)
	s := leasestore.New(openPG(t, srv.URL, "ns"))
	storetest.Watch(t, s, "job")
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer srv.Thaw()
	err := s.SyncTokens(pgCall(t, 300*time.Millisecond))
	storetest.WantUnavailable(t, err, "", srv.Password)
}

// Through PgBouncer in transaction pooling, LISTEN is accepted and hears
// nothing: WatchTokens says so rather than return a watch that never hears
// a change.
func TestTokenFeedRefusedThroughPgBouncer(t *testing.T) {
	s := leasestore.New(openPG(t, pgBouncer(t).URL, freshNamespace()))
	_, err := s.WatchTokens(pgCall(t, storetest.HangGuard), "job", func(leasestore.TokenState) {})
	t.Logf("error: %v", err)
	if !errors.Is(err, leasestore.ErrUnavailable) || !strings.Contains(err.Error(), "PgBouncer") {
		t.Fatalf("WatchTokens through PgBouncer = %v, want ErrUnavailable naming PgBouncer", err)
	}
	if err := s.SyncTokens(pgCall(t, storetest.HangGuard)); err != nil {
		t.Errorf("SyncTokens without a watch: %v, want nil", err)
	}
}
