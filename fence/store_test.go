package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/registrytest"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/etcdstore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/pgstore"
	"github.com/leasectl/leasectl/leasestore/redisstore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// The package's shared redis-server, single-member etcd and PostgreSQL.
var (
	testRedis = testserver.Share("test redis-server", redistest.Start, redistest.Options{})
	testEtcd  = testserver.Share("test etcd", etcdtest.Start, etcdtest.Options{})
	testPG    = testserver.Share("test PostgreSQL", pgtest.Start, pgtest.Options{})
)

func TestMain(m *testing.M) { os.Exit(testserver.Run(m, testRedis, testEtcd, testPG)) }

// realStore is one kind of real store, as the tests open it.
type realStore struct {
	name string
	feed bool // the store is a leasestore.TokenFeed
	// open returns the checker's client and a holder's client of a fresh
	// store, and a wipe that loses all its data.
	open func(t *testing.T) (checked, holder *leasestore.Store, wipe func())
}

var namespaces atomic.Int64

var realStores = []realStore{
	{"redis", true, func(t *testing.T) (*leasestore.Store, *leasestore.Store, func()) {
		srv := testRedis.Get(t)
		ns := fmt.Sprintf("fence%d", namespaces.Add(1))
		wipe := func() {
			if _, err := srv.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		}
		return openRedis(t, srv.URL, ns), openRedis(t, srv.URL, ns), wipe
	}},
	{"postgres", true, func(t *testing.T) (*leasestore.Store, *leasestore.Store, func()) {
		srv := testPG.Get(t)
		ns := fmt.Sprintf("fence%d", namespaces.Add(1))
		wipe := func() {
			// The namespace's tables (leasestore/pgstore, sql/tables_v1.sql),
			// as an operator cleaning up by hand would lose them.
			if err := srv.Exec(fmt.Sprintf(`TRUNCATE %[1]q.jobs, %[1]q.runs, %[1]q.history`, ns)); err != nil {
				t.Fatal(err)
			}
		}
		return openPG(t, srv.URL, ns), openPG(t, srv.URL, ns), wipe
	}},
	{"embedded", true, func(t *testing.T) (*leasestore.Store, *leasestore.Store, func()) {
		dir := t.TempDir()
		wipe := func() {
			// The embedded store's data (leasestore/filestore, file.go).
			if err := os.RemoveAll(filepath.Join(dir, "leasectl.store")); err != nil {
				t.Fatal(err)
			}
		}
		return openEmbedded(t, dir), openEmbedded(t, dir), wipe
	}},
	{"registry", true, func(t *testing.T) (*leasestore.Store, *leasestore.Store, func()) {
		// The checker reads through the registry with a reader's token; the
		// holder runs through it with a worker's, as a downstream service and
		// a fleet of workers would. The registry's embedded store has a
		// token feed, which the checker follows through the registry.
		dir := t.TempDir()
		reg := registrytest.Start(t, openEmbedded(t, dir), "leasectl")
		wipe := func() {
			// The embedded store's data (leasestore/filestore, file.go).
			if err := os.RemoveAll(filepath.Join(dir, "leasectl.store")); err != nil {
				t.Fatal(err)
			}
		}
		return leasestore.New(reg.Open(t, "leasectl", registrytest.ReaderToken)), leasestore.New(reg.Open(t, "leasectl", registrytest.WorkerToken)), wipe
	}},
	{"etcd", true, func(t *testing.T) (*leasestore.Store, *leasestore.Store, func()) {
		c := testEtcd.Get(t)
		ns := fmt.Sprintf("fence%d", namespaces.Add(1))
		wipe := func() {
			// The etcd store's keys of ns start with "ns#"; '$' follows '#'.
			body := map[string]any{"key": []byte(ns + "#"), "range_end": []byte(ns + "$")}
			if err := c.Members[0].Do(t.Context(), "/v3/kv/deleterange", body, nil); err != nil {
				t.Fatal(err)
			}
		}
		return openEtcd(t, c.URL(), ns), openEtcd(t, c.URL(), ns), wipe
	}},
}

// patternsFor are the patterns kind can be checked with: write-through
// needs a token feed, and New refuses it on a store without one.
func patternsFor(t *testing.T, kind realStore) []Pattern {
	if kind.feed {
		return patterns
	}
	t.Run(kind.name+"/write-through is refused", func(t *testing.T) {
		checked, _, _ := kind.open(t)
		if _, err := New(checked, Options{Pattern: WriteThrough}); err == nil {
			t.Error("New(write-through) on a store without a token feed succeeded")
		}
	})
	return []Pattern{Authoritative, BoundedStaleness}
}

func openEtcd(t *testing.T, url, ns string) *leasestore.Store {
	t.Helper()
	return leasestore.New(storetest.Open(t, etcdstore.Open, url, ns))
}

func openRedis(t *testing.T, url, ns string) *leasestore.Store {
	t.Helper()
	return leasestore.New(storetest.Open(t, redisstore.Open, url, ns))
}

func openPG(t *testing.T, url, ns string) *leasestore.Store {
	t.Helper()
	return leasestore.New(storetest.Open(t, pgstore.Open, url, ns))
}

func openEmbedded(t *testing.T, dir string) *leasestore.Store {
	t.Helper()
	return leasestore.New(storetest.Open(t, filestore.Open, dir, "leasectl"))
}

// settle waits, with WriteThrough, until every change the store published
// has reached the checker (the feed's heartbeat is a barrier).
func settle(t *testing.T, p Pattern, checked leasestore.TokenFeed) {
	t.Helper()
	if p != WriteThrough {
		return
	}
	if err := checked.SyncTokens(storetest.Ctx(t)); err != nil {
		t.Fatalf("SyncTokens: %v", err)
	}
}

// resync runs the feed's heartbeat until it succeeds: a heartbeat fails
// while a watch has not read its state again since its connection was lost.
func resync(t *testing.T, checked leasestore.TokenFeed) {
	t.Helper()
	deadline := time.Now().Add(storetest.HangGuard)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := checked.SyncTokens(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed's heartbeat still fails after %s: %v", storetest.HangGuard, err)
		}
	}
}

// A run overtaken by a newer one (a zombie: its supervisor was frozen past
// its lease, and came back) writes with its old token: every pattern refuses
// it, on every store.
func TestZombieRefusedByEveryPatternOnRealStores(t *testing.T) {
	for _, kind := range realStores {
		for _, p := range patternsFor(t, kind) {
			t.Run(kind.name+"/"+p.String(), func(t *testing.T) {
				checked, holder, _ := kind.open(t)
				c, _ := checker(t, checked, Options{Pattern: p})
				zombie := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
				accept(t, c, "job", zombie.Token)
				storetest.Release(t, holder, zombie, leasestore.ResultFailed)
				cur := storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
				settle(t, p, checked)
				if p != BoundedStaleness {
					// Bounded staleness may accept the zombie until the
					// confirmation expires or a newer token reaches it.
					refuse(t, c, "job", zombie.Token)
				}
				accept(t, c, "job", cur.Token)
				if se := refuse(t, c, "job", zombie.Token); se.FromStore || se.Newest != cur.Token {
					t.Errorf("StaleError %+v, want a refusal from memory naming %d", se, cur.Token)
				}
			})
		}
	}
}

// Bounded staleness on a real store: the zombie is refused once the
// confirmation it rode on expired, even with no newer writer.
func TestBoundedStalenessExpiresOnRealStores(t *testing.T) {
	for _, kind := range realStores {
		t.Run(kind.name, func(t *testing.T) {
			checked, holder, _ := kind.open(t)
			c, clock := checker(t, checked, Options{Pattern: BoundedStaleness, MaxStaleness: 5 * time.Second})
			zombie := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
			accept(t, c, "job", zombie.Token)
			storetest.Release(t, holder, zombie, leasestore.ResultFailed)
			storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
			accept(t, c, "job", zombie.Token) // within the bound: the documented window
			clock.Advance(5 * time.Second)
			if se := refuse(t, c, "job", zombie.Token); !se.FromStore {
				t.Errorf("StaleError %+v, want the store's answer", se)
			}
		})
	}
}

// With the feed's connection cut (Redis pub/sub, PostgreSQL LISTEN),
// write-through asks the store: at once when the loss is seen, and in any
// case once the heartbeat has failed for MaxLag (here the Redis
// subscription is refused, so it stays cut).
func TestWriteThroughFallsBackWhenTheSubscriptionIsCut(t *testing.T) {
	t.Run("connection killed", func(t *testing.T) {
		checked, holder, _ := realStores[0].open(t)
		c, _ := checker(t, checked, Options{Pattern: WriteThrough})
		zombie := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
		accept(t, c, "job", zombie.Token)
		if _, err := testRedis.Get(t).Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
		storetest.Release(t, holder, zombie, leasestore.ResultFailed)
		cur := storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
		// Until the checker's goroutine has read the connection's end, the
		// zombie can still pass: the window the package documentation
		// states. Once a heartbeat succeeds again, the grant has reached the
		// checker, published on the new connection or read after the
		// re-subscription.
		resync(t, checked)
		refuse(t, c, "job", zombie.Token)
		accept(t, c, "job", cur.Token)
	})

	t.Run("PostgreSQL connection terminated", func(t *testing.T) {
		srv := testPG.Get(t)
		ns := fmt.Sprintf("fence%d", namespaces.Add(1))
		checked := openPG(t, srv.URL+"&application_name="+ns, ns)
		holder := openPG(t, srv.URL, ns)
		c, _ := checker(t, checked, Options{Pattern: WriteThrough})
		zombie := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
		accept(t, c, "job", zombie.Token)
		settle(t, WriteThrough, checked)
		if n := storeChecks(c, func() { accept(t, c, "job", zombie.Token) }); n != 0 {
			t.Fatalf("with the feed up the check asked the store %d times, want 0", n)
		}
		// Every backend of the checker's store, its feed's among them, as an
		// operator's pg_terminate_backend or a failover would end them.
		rows, err := srv.Query(fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "+
			"WHERE application_name = '%s'", ns))
		if err != nil || len(rows) == 0 {
			t.Fatalf("terminating the checker's backends: %q, %v", rows, err)
		}
		storetest.Release(t, holder, zombie, leasestore.ResultFailed)
		cur := storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
		// As with Redis: until the feed has read the connection's end the
		// zombie can pass; once a heartbeat succeeds again, the grant has
		// reached the checker, read after the feed reconnected.
		resync(t, checked)
		refuse(t, c, "job", zombie.Token)
		accept(t, c, "job", cur.Token)
	})

	t.Run("subscription refused", func(t *testing.T) {
		srv := testRedis.Get(t)
		user := fmt.Sprintf("checker%d", namespaces.Add(1))
		if _, err := srv.Do("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all"); err != nil {
			t.Fatal(err)
		}
		ns := fmt.Sprintf("fence%d", namespaces.Add(1))
		checked := openRedis(t, strings.Replace(srv.URL, "redis://", "redis://"+user+":pw@", 1), ns)
		holder := openRedis(t, srv.URL, ns)
		c, clock := checker(t, checked, Options{Pattern: WriteThrough, Heartbeat: time.Second, MaxLag: 3 * time.Second})
		zombie := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
		accept(t, c, "job", zombie.Token)
		settle(t, WriteThrough, checked)
		if n := storeChecks(c, func() { accept(t, c, "job", zombie.Token) }); n != 0 {
			t.Fatalf("with the feed up the check asked the store %d times, want 0", n)
		}

		// Redis disconnects a subscriber whose channels are revoked, and
		// refuses its subscriptions from then on: the feed stays cut.
		if _, err := srv.Do("ACL", "SETUSER", user, "resetchannels"); err != nil {
			t.Fatal(err)
		}
		storetest.Release(t, holder, zombie, leasestore.ResultFailed)
		cur := storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
		for range 3 {
			beat(t, c, clock)
		}
		var se *StaleError
		if n := storeChecks(c, func() { se = refuse(t, c, "job", zombie.Token) }); n != 1 || !se.FromStore {
			t.Errorf("past MaxLag with the feed cut: %d store checks, StaleError %+v; want the store's answer", n, se)
		}
		if n := storeChecks(c, func() { accept(t, c, "job", cur.Token) }); n != 1 {
			t.Errorf("the new holder's check asked the store %d times, want 1 (the feed is cut)", n)
		}

		// Channels allowed again: a heartbeat subscribes once more, the watch
		// reads the job, and memory answers again.
		if _, err := srv.Do("ACL", "SETUSER", user, "allchannels"); err != nil {
			t.Fatal(err)
		}
		for beats := 1; ; beats++ {
			beat(t, c, clock)
			if storeChecks(c, func() { accept(t, c, "job", cur.Token) }) == 0 {
				break
			}
			if beats == 5 {
				t.Fatalf("after %d heartbeats with the channels allowed again, checks still ask the store", beats)
			}
		}
		refuse(t, c, "job", zombie.Token)
	})
}

// A token from the future: the store lost its data (a Redis restarted
// without persistence, the embedded file removed), and its next grant comes
// from the clock floor, above every earlier token. Each pattern handles it
// as the package documentation says.
func TestTokenFromTheFutureOnRealStores(t *testing.T) {
	for _, kind := range realStores {
		for _, p := range patternsFor(t, kind) {
			t.Run(kind.name+"/"+p.String(), func(t *testing.T) {
				checked, holder, wipe := kind.open(t)
				opts := Options{Pattern: p}
				c, clock := checker(t, checked, opts)
				old := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
				accept(t, c, "job", old.Token)
				wipe()

				switch {
				case p == Authoritative:
					if se := refuse(t, c, "job", old.Token); !se.FromStore {
						t.Errorf("StaleError %+v, want the store's answer: it has no token", se)
					}
				case p == BoundedStaleness:
					accept(t, c, "job", old.Token) // within the bound
					clock.Advance(DefaultMaxStaleness)
					refuse(t, c, "job", old.Token)
				case kind.name == "embedded", kind.name == "etcd", kind.name == "registry":
					// The embedded store's heartbeat reads the job again (so
					// does the registry's, of the embedded store behind it);
					// etcd's watch reports the record's deletion: token 0.
					settle(t, p, checked)
					if se := refuse(t, c, "job", old.Token); se.FromStore {
						t.Errorf("StaleError %+v, want a refusal from memory after the heartbeat's read", se)
					}
				default:
					// FLUSHALL or TRUNCATE on a connection that stays up
					// publishes nothing: the old token stands until the next
					// grant.
					settle(t, p, checked)
					accept(t, c, "job", old.Token)
				}

				cur := storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
				if cur.Token <= old.Token {
					t.Fatalf("the grant after the wipe has token %d, not above %d: the clock floor failed", cur.Token, old.Token)
				}
				settle(t, p, checked)
				accept(t, c, "job", cur.Token)
				refuse(t, c, "job", old.Token)
				if se := refuse(t, c, "job", cur.Token+1_000_000); !se.FromStore {
					t.Errorf("a token never granted: %+v, want the store's refusal", se)
				}
				accept(t, c, "job", cur.Token)
			})
		}
	}
}

// A Redis restarted without persistence drops the feed's connection: the
// watch reads the job again, finds no token, and write-through refuses the
// old one from memory, as the store would; the next grant comes from the
// clock floor.
func TestWriteThroughAfterARedisRestart(t *testing.T) {
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	checked, holder := openRedis(t, srv.URL, "ns"), openRedis(t, srv.URL, "ns")
	c, _ := checker(t, checked, Options{Pattern: WriteThrough})
	old := storetest.Acquire(t, holder, storetest.Request("job", "a", storetest.LongTTL))
	accept(t, c, "job", old.Token)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	resync(t, checked)
	if se := refuse(t, c, "job", old.Token); se.FromStore || se.Live {
		t.Errorf("StaleError %+v, want a refusal from memory: the feed read no token", se)
	}
	cur := storetest.Acquire(t, holder, storetest.Request("job", "b", storetest.LongTTL))
	if cur.Token <= old.Token {
		t.Fatalf("the grant after the restart has token %d, not above %d", cur.Token, old.Token)
	}
	accept(t, c, "job", cur.Token)
	refuse(t, c, "job", old.Token)
}

// Through a registry, write-through rides out the registry's restart. While
// the registry is down its watches' polls fail, the feed reports the loss,
// and checks ask the store (through the same registry: an error, never an
// acceptance from memory). Once the watch is made again a heartbeat succeeds,
// and memory answers with the grant made meanwhile.
func TestWriteThroughAcrossARegistryRestart(t *testing.T) {
	backend := openEmbedded(t, t.TempDir())
	reg := registrytest.Start(t, backend, "leasectl")
	checked := leasestore.New(reg.Open(t, "leasectl", registrytest.ReaderToken))
	c, _ := checker(t, checked, Options{Pattern: WriteThrough})
	zombie := storetest.Acquire(t, backend, storetest.Request("job", "a", storetest.LongTTL))
	accept(t, c, "job", zombie.Token)
	settle(t, WriteThrough, checked)
	if n := storeChecks(c, func() { accept(t, c, "job", zombie.Token) }); n != 0 {
		t.Fatalf("with the feed up the check asked the store %d times, want 0", n)
	}

	reg.Stop(t)
	storetest.Release(t, backend, zombie, leasestore.ResultFailed)
	cur := storetest.Acquire(t, backend, storetest.Request("job", "b", storetest.LongTTL))
	// Until the watch's poll has been answered (shutting_down) and its loss
	// reported, the zombie can still pass: the window the package
	// documentation states. From then on the checker asks the store.
	deadline := time.Now().Add(storetest.HangGuard)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := c.Check(ctx, "job", zombie.Token)
		cancel()
		if err != nil {
			if !errors.Is(err, leasestore.ErrUnavailable) {
				t.Errorf("a check with the registry down: %v, want the store unavailable", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the zombie is still accepted from memory %s after the registry stopped", storetest.HangGuard)
		}
		time.Sleep(10 * time.Millisecond)
	}

	reg.Resume(t)
	resync(t, checked)
	if se := refuse(t, c, "job", zombie.Token); se.FromStore || se.Newest != cur.Token {
		t.Errorf("StaleError %+v, want a refusal from memory naming %d", se, cur.Token)
	}
	if n := storeChecks(c, func() { accept(t, c, "job", cur.Token) }); n != 0 {
		t.Errorf("after the restart the new holder's check asked the store %d times, want 0", n)
	}
}

// deadFeed is a store's driver whose token feed cannot be reached (its
// LISTEN connection refused, say) while the rest of it can.
type deadFeed struct{ leasestore.Driver }

var errFeedDown = &leasestore.UnavailableError{Op: "watch tokens", Err: errors.New("the feed's connection is refused")}

func (deadFeed) StartTokens(context.Context, *leasestore.TokenHub) (leasestore.TokenSource, error) {
	return nil, errFeedDown
}

// Through a registry whose store's feed is down, write-through may be
// chosen, but every watch fails unavailable, so every check asks the
// store, which refuses the zombie.
func TestWriteThroughThroughARegistryWhoseFeedIsDown(t *testing.T) {
	backend := storetest.Open(t, filestore.Open, t.TempDir(), "leasectl")
	reg := registrytest.Start(t, leasestore.New(deadFeed{backend}), "leasectl")
	checked := leasestore.New(reg.Open(t, "leasectl", registrytest.ReaderToken))
	_, err := checked.WatchTokens(storetest.Ctx(t), "job", func(leasestore.TokenState) {})
	if !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("WatchTokens through a registry whose store's feed is down: %v, want unavailable", err)
	}

	c, _ := checker(t, checked, Options{Pattern: WriteThrough})
	zombie := storetest.Acquire(t, backend, storetest.Request("job", "a", storetest.LongTTL))
	for range 2 {
		if n := storeChecks(c, func() { accept(t, c, "job", zombie.Token) }); n != 1 {
			t.Errorf("a check asked the store %d times, want 1: there is no feed", n)
		}
	}
	storetest.Release(t, backend, zombie, leasestore.ResultFailed)
	cur := storetest.Acquire(t, backend, storetest.Request("job", "b", storetest.LongTTL))
	if se := refuse(t, c, "job", zombie.Token); !se.FromStore {
		t.Errorf("StaleError %+v, want the store's answer", se)
	}
	accept(t, c, "job", cur.Token)
}
