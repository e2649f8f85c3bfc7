package registry

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/clock/fakeclock"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
	"github.com/leasectl/leasectl/registry/api"
)

// feedStore is an embedded store, without the registry's fakeStore's
// counting and faults.
func feedStore(t *testing.T) leasestore.Driver {
	t.Helper()
	s, err := filestore.Open(t.TempDir(), testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// watchTokens starts a token watch of job with token and returns its answer.
func watchTokens(t *testing.T, srv *testServer, job, token string) api.TokenWatch {
	t.Helper()
	a := request(t, srv.url, http.MethodPost, api.PathTokenWatches, token, api.TokenWatchRequest{JobID: job})
	if a.status != http.StatusCreated {
		t.Fatalf("watch tokens: %d %s", a.status, a.body)
	}
	var w api.TokenWatch
	a.decode(t, &w)
	if w.WatchID == "" || w.JobID != job || len(w.States) == 0 {
		t.Fatalf("token watch %+v", w)
	}
	return w
}

// pollTokens long-polls watch id for the states after after.
func pollTokens(t *testing.T, srv *testServer, id, token string, after int64, timeoutMS int) answer {
	t.Helper()
	return request(t, srv.url, http.MethodGet, api.PathTokenWatch+id+"?after="+strconv.FormatInt(after, 10)+"&timeout_ms="+strconv.Itoa(timeoutMS), token, nil)
}

func states(t *testing.T, a answer) []api.TokenState {
	t.Helper()
	var ts api.TokenStates
	a.decode(t, &ts)
	return ts.States
}

// A reader's watch answers its first read at once; a poll returns the
// states after the seq it acknowledges, as soon as one comes, and a poll
// asked again (its answer lost) gets them again.
func TestTokenWatchLongPoll(t *testing.T) {
	store := feedStore(t)
	srv := newTestServer(t, store, nil)
	w := watchTokens(t, srv, "j", readerToken)
	if first := w.States[0]; len(w.States) != 1 || first != (api.TokenState{Seq: 1, Read: true}) {
		t.Fatalf("first states %+v, want one read of no token", w.States)
	}
	start := time.Now()
	if got := states(t, pollTokens(t, srv, w.WatchID, readerToken, 1, 100)); len(got) != 0 {
		t.Errorf("a poll with no change answered %+v", got)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("a 100 ms poll returned after %s", took)
	}

	l := storetest.Acquire(t, store, storetest.Request("j", "a", time.Minute))
	for range 2 { // the second time: the first answer was lost
		// The embedded store reads the job on every change: Read may be set.
		got := states(t, pollTokens(t, srv, w.WatchID, readerToken, 1, 10_000))
		if len(got) != 1 || got[0].Seq != 2 || got[0].FencingToken != l.Token || !got[0].Live || got[0].Lost {
			t.Fatalf("a poll after the grant: %+v, want state 2, the grant of %d", got, l.Token)
		}
	}
	if e := pollTokens(t, srv, w.WatchID, readerToken, 3, 10).err(t); e.Code != api.CodeInvalidRequest || e.Field != "after" {
		t.Errorf("a poll after a state not yet there: %+v, want invalid after", e)
	}
	if e := pollTokens(t, srv, w.WatchID, workerToken, 2, 10).err(t); e.Code != api.CodeTokenWatchNotFound {
		t.Errorf("another token's poll: %+v, want %s", e, api.CodeTokenWatchNotFound)
	}
	if a := request(t, srv.url, http.MethodDelete, api.PathTokenWatch+w.WatchID, readerToken, nil); a.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	if e := pollTokens(t, srv, w.WatchID, readerToken, 2, 10).err(t); e.Code != api.CodeTokenWatchNotFound {
		t.Errorf("a poll after delete: %+v, want %s", e, api.CodeTokenWatchNotFound)
	}
	if n := srv.watches.count(); n != 0 {
		t.Errorf("%d token watches after delete, want 0", n)
	}
}

// The sync is a barrier: a change made before it is numbered at or below
// the seq it answers. Watches it does not hold are missing.
func TestTokenSync(t *testing.T) {
	store := feedStore(t)
	srv := newTestServer(t, store, nil)
	w := watchTokens(t, srv, "j", readerToken)
	for i := range 3 {
		l := storetest.Acquire(t, store, storetest.Request("j", "w"+strconv.Itoa(i), time.Minute))
		a := request(t, srv.url, http.MethodPost, api.PathTokenSync, readerToken, api.TokenSyncRequest{WatchIDs: []string{w.WatchID, "nosuchwatch"}})
		var ts api.TokenSync
		a.decode(t, &ts)
		if len(ts.Watches) != 1 || ts.Watches[0].WatchID != w.WatchID || len(ts.Missing) != 1 || ts.Missing[0] != "nosuchwatch" {
			t.Fatalf("sync %+v, want the watch's seq and the unknown one missing", ts)
		}
		got := states(t, pollTokens(t, srv, w.WatchID, readerToken, ts.Watches[0].Seq-1, 10))
		if len(got) != 1 || got[0].FencingToken != l.Token || !got[0].Live {
			t.Fatalf("the state at the synced seq %d: %+v, want the grant of %d made before the sync", ts.Watches[0].Seq, got, l.Token)
		}
		storetest.Release(t, store, l, leasestore.ResultCompleted)
	}
	if e := request(t, srv.url, http.MethodPost, api.PathTokenSync, readerToken, api.TokenSyncRequest{WatchIDs: []string{""}}).err(t); e.Field != "watch_ids" {
		t.Errorf("a sync naming an empty watch: %+v, want invalid watch_ids", e)
	}
}

// A client that lets more states pile up than the registry keeps is told
// it fell behind, and the watch is gone.
func TestTokenWatchFallsBehind(t *testing.T) {
	store := feedStore(t)
	srv := newTestServer(t, store, nil)
	srv.watches.maxStates = 2
	w := watchTokens(t, srv, "j", readerToken)
	deadline := time.Now().Add(storetest.HangGuard)
	for i := 0; ; i++ {
		// Each round a new grant. The embedded store may fold changes that
		// come close together into one read, so rounds go on until the
		// third state. Polls after the first read acknowledge nothing new.
		l := storetest.Acquire(t, store, storetest.Request("j", "w"+strconv.Itoa(i), time.Minute))
		storetest.Release(t, store, l, leasestore.ResultFailed)
		a := pollTokens(t, srv, w.WatchID, readerToken, 1, 50)
		if a.status == http.StatusOK {
			if got := states(t, a); len(got) > 2 {
				t.Fatalf("the watch answered %+v with room for two", got)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the watch still answers %s after %d grants with room for two states", a.body, i+1)
			}
			continue
		}
		if e := a.err(t); e.Code != api.CodeTokenWatchBehind {
			t.Fatalf("a poll of a watch that fell behind: %+v, want %s", e, api.CodeTokenWatchBehind)
		}
		break
	}
	if e := pollTokens(t, srv, w.WatchID, readerToken, 1, 10).err(t); e.Code != api.CodeTokenWatchNotFound {
		t.Errorf("a poll after falling behind: %+v, want the watch gone", e)
	}
}

// Token watches nobody polls are dropped after tokenWatchIdle, and a drain
// answers polls in progress.
func TestIdleTokenWatchesAreDropped(t *testing.T) {
	clock := fakeclock.New(time.Now())
	srv := newTestServer(t, feedStore(t), func(c *Config) { c.Clock = clock })
	w := watchTokens(t, srv, "j", readerToken)
	srv.watches.sweep()
	if srv.watches.count() != 1 {
		t.Fatal("a fresh token watch was swept")
	}
	clock.Advance(tokenWatchIdle + time.Second)
	srv.watches.sweep()
	if e := pollTokens(t, srv, w.WatchID, readerToken, 1, 10).err(t); e.Code != api.CodeTokenWatchNotFound {
		t.Errorf("an idle token watch after the sweep: %+v, want it dropped", e)
	}

	w = watchTokens(t, srv, "j", readerToken)
	got := make(chan answer, 1)
	go func() { got <- pollTokens(t, srv, w.WatchID, readerToken, 1, 30_000) }()
	drainAnswers(t, srv, got, "token poll", func() bool { return holdsPoll(srv, w.WatchID) })
}

// holdsPoll reports whether a poll of token watch id is in progress.
func holdsPoll(srv *testServer, id string) bool {
	srv.watches.mu.Lock()
	w := srv.watches.watches[id]
	srv.watches.mu.Unlock()
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting > 0
}

// One token holds at most maxPerOwner token watches: past it, its watch is
// refused with too_many_token_watches naming the limit, while another
// token still gets one; a watch dropped makes room again.
func TestTokenWatchesPerToken(t *testing.T) {
	srv := newTestServer(t, feedStore(t), nil)
	srv.watches.held.maxPerOwner = 2
	first := watchTokens(t, srv, "a", readerToken)
	watchTokens(t, srv, "b", readerToken)
	a := request(t, srv.url, http.MethodPost, api.PathTokenWatches, readerToken, api.TokenWatchRequest{JobID: "c"})
	if e := a.err(t); e.Code != api.CodeTooManyTokenWatches || !strings.Contains(e.Message, "2 token watches, the limit for one token") || a.header.Get("Retry-After") == "" {
		t.Errorf("a third watch of one token: %+v, want %s naming the limit of 2", e, api.CodeTooManyTokenWatches)
	}
	watchTokens(t, srv, "c", operatorToken)
	if a := request(t, srv.url, http.MethodDelete, api.PathTokenWatch+first.WatchID, readerToken, nil); a.status != http.StatusNoContent {
		t.Fatalf("unwatch: %d %s", a.status, a.body)
	}
	watchTokens(t, srv, "c", readerToken)
}

// heldFeed is an embedded store whose feed heartbeats are counted and each
// held until the test lets it end.
type heldFeed struct {
	leasestore.Driver
	entered chan struct{}
	release chan struct{}
}

func (f *heldFeed) StartTokens(ctx context.Context, hub *leasestore.TokenHub) (leasestore.TokenSource, error) {
	src, err := f.Driver.StartTokens(ctx, hub)
	return heldSource{src, f}, err
}

// heldSource is the source of a heldFeed, whose barrier is the heartbeat.
type heldSource struct {
	leasestore.TokenSource
	f *heldFeed
}

func (s heldSource) Barrier(ctx context.Context) error {
	s.f.entered <- struct{}{}
	<-s.f.release
	return s.TokenSource.Barrier(ctx)
}

// Concurrent syncs share the store's heartbeat: those that arrive while one
// runs wait for the next one, which starts after it and serves them all;
// none is answered by a heartbeat that began before it arrived.
func TestTokenSyncSharesTheStoreHeartbeat(t *testing.T) {
	store := feedStore(t)
	f := &heldFeed{Driver: store, entered: make(chan struct{}, 8), release: make(chan struct{})}
	srv := newTestServer(t, f, nil)
	w := watchTokens(t, srv, "j", readerToken)
	sync := func() <-chan answer {
		got := make(chan answer, 1)
		go func() {
			got <- request(t, srv.url, http.MethodPost, api.PathTokenSync, readerToken, api.TokenSyncRequest{WatchIDs: []string{w.WatchID}})
		}()
		return got
	}
	first := sync()
	<-f.entered // the first heartbeat runs
	later := []<-chan answer{sync(), sync(), sync()}
	// The later ones are queued behind the running heartbeat (nothing else
	// can be observed of them from here).
	deadline := time.Now().Add(10 * time.Second)
	for {
		srv.watches.hbMu.Lock()
		queued := srv.watches.hbNext != nil
		srv.watches.hbMu.Unlock()
		if queued {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the later syncs never reached the registry")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let every later sync join the queue
	f.release <- struct{}{}
	if a := <-first; a.status != http.StatusOK {
		t.Fatalf("the first sync: %d %s", a.status, a.body)
	}
	select {
	case a := <-later[0]:
		t.Fatalf("a later sync answered %d %s by the heartbeat that began before it arrived", a.status, a.body)
	case <-f.entered: // the next heartbeat, for all of them
	}
	for i, c := range later {
		select {
		case a := <-c:
			t.Fatalf("sync %d answered %d %s before its heartbeat ended", i+2, a.status, a.body)
		default:
		}
	}
	f.release <- struct{}{}
	for i, c := range later {
		if a := <-c; a.status != http.StatusOK {
			t.Errorf("sync %d: %d %s", i+2, a.status, a.body)
		}
	}
	select {
	case <-f.entered:
		t.Error("a third store heartbeat for four syncs; want two")
	default:
	}
}
