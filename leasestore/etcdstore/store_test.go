package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// testEtcd is the package's shared single-member etcd.
var testEtcd = testserver.Share("test etcd", etcdtest.Start, etcdtest.Options{})

func TestMain(m *testing.M) {
	code := testserver.Run(m, testEtcd)
	testenv.Cleanup() // the fault tests build the binary
	os.Exit(code)
}

var namespaces atomic.Int64

// freshNamespace is a namespace no other test uses.
func freshNamespace() string { return fmt.Sprintf("et%d", namespaces.Add(1)) }

// openEtcd opens a client closed when the test ends.
func openEtcd(t testing.TB, rawURL, namespace string) *Store {
	t.Helper()
	return storetest.Open(t, Open, rawURL, namespace)
}

// deletePrefix deletes every key of namespace ns, as an operator's
// `etcdctl del --prefix` would; the etcd leases stay.
func deletePrefix(t testing.TB, c *etcdtest.Cluster, ns string) {
	t.Helper()
	p := []byte(ns + "#")
	end := []byte(ns + "$") // '#' + 1
	if err := c.Members[0].Do(context.Background(), "/v3/kv/deleterange", map[string]any{"key": p, "range_end": end}, nil); err != nil {
		t.Fatal(err)
	}
}

// harness makes each test's store in a namespace of its own on c; a wipe
// deletes the namespace's keys.
type harness struct{ c *etcdtest.Cluster }

func (h harness) NewStore(testing.TB) storetest.Fixture {
	ns := freshNamespace()
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver { return openEtcd(t, h.c.URL(), ns) },
		Wipe: func(t testing.TB) { deletePrefix(t, h.c, ns) },
	}
}

func (harness) Abilities() storetest.Abilities {
	return storetest.Abilities{MinTTL: minTTL, CommonHistoryWords: true, CoarseExpiry: true, WakesInTurn: true}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness{testEtcd.Get(t)})
}

// call bounds a call the way the supervisor does.
func call(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

// enableAuth turns on etcd's authentication on c with a root user and a
// least-privilege user app (password apppw) whose role may read and write
// only namespace ns's keys, as docs/etcd.md tells operators to set it up.
func enableAuth(t *testing.T, c *etcdtest.Cluster, rootPassword, ns string) {
	t.Helper()
	m := c.Members[0]
	prefix := []byte(ns + "#")
	end := []byte(ns + "$")
	for _, step := range []struct {
		path string
		body map[string]any
	}{
		{"/v3/auth/user/add", map[string]any{"name": "root", "password": rootPassword}},
		{"/v3/auth/user/grant", map[string]any{"user": "root", "role": "root"}},
		{"/v3/auth/role/add", map[string]any{"name": "leasectl-" + ns}},
		{"/v3/auth/role/grant", map[string]any{"name": "leasectl-" + ns, "perm": map[string]any{"permType": "READWRITE", "key": prefix, "range_end": end}}},
		{"/v3/auth/user/add", map[string]any{"name": "app", "password": "apppw"}},
		{"/v3/auth/user/grant", map[string]any{"user": "app", "role": "leasectl-" + ns}},
		{"/v3/auth/enable", map[string]any{}},
	} {
		if err := m.Do(t.Context(), step.path, step.body, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEtcdAuth(t *testing.T) {
	c, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	const rootPassword = "r00t-Pa55"
	ns := freshNamespace()
	enableAuth(t, c, rootPassword, ns)
	host := c.Endpoints()

	t.Run("least-privilege role", func(t *testing.T) {
		s := openEtcd(t, "etcd://app:apppw@"+host, ns)
		l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
		if err := s.Renew(call(t, storetest.HangGuard), l); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		storetest.Release(t, s, l, leasestore.ResultCompleted)
		if _, err := s.Scan(call(t, storetest.HangGuard)); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if _, err := s.Leases(call(t, storetest.HangGuard)); err != nil {
			t.Fatalf("Leases: %v", err)
		}
		sub, err := s.Subscribe(call(t, storetest.HangGuard), "job", "")
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		sub.Close()
	})
	t.Run("another namespace is denied", func(t *testing.T) {
		s := openEtcd(t, "etcd://app:apppw@"+host, ns+"x")
		_, err := s.Acquire(call(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "etcd denies leasectl a key it needs", "apppw")
	})
	for name, url := range map[string]string{
		"wrong password": "etcd://root:wr0ng-Pa55@" + host,
		"unknown user":   "etcd://nobody:" + rootPassword + "@" + host,
	} {
		t.Run(name, func(t *testing.T) {
			s := openEtcd(t, url, ns)
			_, err := s.Acquire(call(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
			storetest.WantUnavailable(t, err, "etcd refused the credentials", rootPassword, "wr0ng-Pa55")
		})
	}
	t.Run("no credentials", func(t *testing.T) {
		s := openEtcd(t, "etcd://"+host, ns)
		_, err := s.Acquire(call(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "etcd requires a user and password")
	})
}

func TestEtcdUnreachable(t *testing.T) {
	c, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := c.URL()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = openEtcd(t, url, "ns").Acquire(call(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
	storetest.WantUnavailable(t, err, "cannot connect to etcd at "+c.Endpoints())
}

// TestEtcdFailsOverToTheNextEndpoint lists a dead endpoint first: calls go
// on to the next member.
func TestEtcdFailsOverToTheNextEndpoint(t *testing.T) {
	dead, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Stop(); err != nil {
		t.Fatal(err)
	}
	s := openEtcd(t, "etcd://"+dead.Endpoints()+","+testEtcd.Get(t).Endpoints(), freshNamespace())
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	storetest.Release(t, s, l, leasestore.ResultCompleted)
}

func TestEtcdFrozenMemberReturnsAtDeadline(t *testing.T) {
	c, err := etcdtest.Start(etcdtest.Options{})
	c = testserver.Own(t, c, err)
	s := openEtcd(t, c.URL(), "ns")
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	if err := c.Members[0].Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Members[0].Thaw() })
	storetest.WantFrozenCallsReturn(t, s, l, func(t testing.TB) leasestore.Driver { return openEtcd(t, c.URL(), "ns") }, "etcd")
}

// TestEtcdRenewRefusedAfterTheKeysWereDeleted deletes a held job's keys by
// hand: its etcd leases live on, but the renewal must not pass for holding
// the job, which another run can now acquire; nor may a renewal whose round
// trip is to be written put the run's evidence back.
func TestEtcdRenewRefusedAfterTheKeysWereDeleted(t *testing.T) {
	for name, rtt := range map[string]time.Duration{"no round trip": 0, "a round trip to write": 40 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			c := testEtcd.Get(t)
			ns := freshNamespace()
			s := openEtcd(t, c.URL(), ns)
			l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
			deletePrefix(t, c, ns)
			l.RTT = rtt
			if err := s.Renew(call(t, storetest.HangGuard), l); !errors.Is(err, leasestore.ErrLeaseLost) {
				t.Fatalf("Renew after the job's keys were deleted = %v, want ErrLeaseLost", err)
			}
			if st := storetest.Status(t, s, "job"); st.State != leasestore.StateIdle {
				t.Fatalf("after a refused renewal the job is %s (%+v), want IDLE: the renewal wrote", st.State, st)
			}
			next := storetest.Acquire(t, openEtcd(t, c.URL(), ns), storetest.Request("job", "w2", storetest.LongTTL))
			if next.Token <= l.Token {
				t.Fatalf("token %d after the keys were deleted, want above %d", next.Token, l.Token)
			}
		})
	}
}

// TestEtcdRenewWritesTheRoundTripOnlyWhenItMoved holds Renew to rttSlack:
// a round trip within it of the one kept is not written (the evidence's
// revision stays), one past it is, and a renewal by a client that did not
// acquire the lease still keeps it.
func TestEtcdRenewWritesTheRoundTripOnlyWhenItMoved(t *testing.T) {
	c := testEtcd.Get(t)
	s := openEtcd(t, c.URL(), freshNamespace())
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	evidenceRevision := func() int64 {
		t.Helper()
		states, err := s.read(t.Context(), "test", "job")
		if err != nil || states[0].slot(0) == nil || states[0].slot(0).ev == nil {
			t.Fatalf("reading the job's evidence: %v", err)
		}
		return states[0].slot(0).ev.ModRevision
	}
	renew := func(s *Store, rtt, want time.Duration) {
		t.Helper()
		l.RTT = rtt
		if err := s.Renew(call(t, storetest.HangGuard), l); err != nil {
			t.Fatalf("Renew with round trip %s: %v", rtt, err)
		}
		if st := storetest.Status(t, s, "job"); st.Holder == nil || st.Holder.LastRTT != want {
			t.Fatalf("after a renewal with round trip %s the holder is %+v, want last round trip %s", rtt, st.Holder, want)
		}
	}
	renew(s, 0, 0)
	renew(s, 40*time.Millisecond, 40*time.Millisecond)
	kept := evidenceRevision()
	renew(s, 49*time.Millisecond, 40*time.Millisecond) // within a quarter
	renew(s, 40*time.Millisecond+500*time.Microsecond, 40*time.Millisecond)
	if got := evidenceRevision(); got != kept {
		t.Errorf("renewals within the slack rewrote the evidence: revision %d, want %d", got, kept)
	}
	renew(s, 80*time.Millisecond, 80*time.Millisecond)
	renew(s, 0, 80*time.Millisecond) // none measured: the last one stays
	other := openEtcd(t, c.URL(), s.ns)
	renew(other, 2*time.Millisecond, 2*time.Millisecond)
	renew(s, 7*time.Millisecond, 2*time.Millisecond) // within the floor of 5 ms
	renew(s, 40*time.Millisecond, 40*time.Millisecond)
}

// TestEtcdReadsRecordsWrittenBeforeRegionsAndRoundTrips writes a job's
// record and a run's evidence as the store wrote them before it kept
// regions and round trips: the job is unrestricted until a grant names a
// region, and the run has no round trip until a renewal reports one.
func TestEtcdReadsRecordsWrittenBeforeRegionsAndRoundTrips(t *testing.T) {
	c := testEtcd.Get(t)
	s := openEtcd(t, c.URL(), freshNamespace())
	put := func(key []byte, value string, lease int64) {
		t.Helper()
		body := map[string]any{"key": key, "value": []byte(value)}
		if lease != 0 {
			body["lease"] = fmt.Sprint(lease)
		}
		if err := c.Members[0].Do(t.Context(), "/v3/kv/put", body, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(s.key(kindJob, "old"), `{"last_token":1767225600000000,"attempts":3,"max_crashes":3,"last_holder":"w0","last_host":"h0",`+
		`"history":[{"At":"2026-01-01T00:00:00Z","Kind":"acquired","Worker":"w0","Token":1767225600000000,"Detail":"attempt 3"}]}`, 0)
	if st := storetest.Status(t, s, "old"); st.Region != "" || st.Attempts != 3 || st.LastToken != 1767225600000000 {
		t.Fatalf("an old record reads as %+v, want no region, 3 attempts, its last token", st)
	}
	req := storetest.Request("old", "w1", storetest.LongTTL)
	req.Region = "eu-west-1"
	l := storetest.Acquire(t, s, req)
	if st := storetest.Status(t, s, "old"); st.Region != "eu-west-1" || st.Attempts != 4 || l.Token <= 1767225600000000 {
		t.Fatalf("after a grant naming a region an old record reads as %+v (token %d), want that region, 4 attempts, a greater token", st, l.Token)
	}

	states, err := s.read(t.Context(), "test", "old")
	if err != nil {
		t.Fatal(err)
	}
	ss := states[0].slot(0)
	ev := ss.evd
	put(s.key(kindEvidence, "old"), fmt.Sprintf(`{"holder":%q,"token":%d,"host":%q,"pid":%d,"command":["true"],"started":"2026-01-01T00:00:00Z",`+
		`"attempt":%d,"ttl":%d,"evidence_ttl":%d,"max_crashes":%d}`, ev.Holder, ev.Token, ev.Host, ev.PID, ev.Attempt, ev.TTL, ev.EvidenceTTL, ev.MaxCrashes),
		ss.ev.Lease)
	if st := storetest.Status(t, s, "old"); st.Holder == nil || st.Holder.LastRTT != 0 || st.Holder.Worker != "w1" {
		t.Fatalf("old evidence reads as holder %+v, want w1 without a round trip", st.Holder)
	}
	l.RTT = 7 * time.Millisecond
	if err := s.Renew(call(t, storetest.HangGuard), l); err != nil { // from a state the write by hand made stale
		t.Fatalf("Renew of a run with old evidence: %v", err)
	}
	if st := storetest.Status(t, s, "old"); st.Holder == nil || st.Holder.LastRTT != l.RTT {
		t.Fatalf("after a renewal, old evidence reads as holder %+v, want last round trip %s", st.Holder, l.RTT)
	}
	storetest.Release(t, s, l, leasestore.ResultCompleted)
}

// TestEtcdScanFollowsTheRunsThatEnded checks that a scan after the first
// reads only the liveness deletions since the last one: evidence written
// by hand without any liveness (which no deletion announces) is not seen
// until etcd compacted the revisions since the mark, when the scan falls
// back to reading every key.
func TestEtcdScanFollowsTheRunsThatEnded(t *testing.T) {
	c := testEtcd.Get(t)
	ns := freshNamespace()
	s := openEtcd(t, c.URL(), ns)
	scan := func(want ...string) {
		t.Helper()
		found, err := s.Scan(call(t, storetest.HangGuard))
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		var jobs []string
		for _, f := range found {
			jobs = append(jobs, f.Job)
		}
		slices.Sort(jobs)
		if !slices.Equal(jobs, want) {
			t.Fatalf("Scan counted the crashes of %v, want %v", jobs, want)
		}
	}
	scan() // the first: reads every key, and leaves the mark

	crashed := storetest.Request("crashed", "w1", minTTL)
	storetest.Acquire(t, s, crashed)
	storetest.Release(t, s, storetest.Acquire(t, s, storetest.Request("released", "w2", storetest.LongTTL)), leasestore.ResultCompleted)
	storetest.Acquire(t, s, storetest.Request("running", "w3", storetest.LongTTL))
	ev, err := json.Marshal(evidence{Holder: "w4", Token: 1, MaxCrashes: 3, Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Members[0].Do(t.Context(), "/v3/kv/put", map[string]any{"key": s.key(kindEvidence, "by-hand"), "value": ev}, nil); err != nil {
		t.Fatal(err)
	}
	for guard := time.Now().Add(storetest.HangGuard); storetest.Status(t, s, "crashed").State != leasestore.StateCrashed; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatal("the crashed run's lease never expired")
		}
	}
	scan("crashed")
	scan()

	// Writes past the mark, then a compaction past them.
	storetest.Acquire(t, s, storetest.Request("past-the-mark", "w5", storetest.LongTTL))
	var st struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
	}
	if err := c.Members[0].Do(t.Context(), "/v3/kv/range", map[string]any{"key": []byte("x")}, &st); err != nil {
		t.Fatal(err)
	}
	if err := c.Members[0].Do(t.Context(), "/v3/kv/compaction", map[string]any{"revision": st.Header.Revision}, nil); err != nil {
		t.Fatal(err)
	}
	scan("by-hand")
}

// TestEtcdSubscriptionSurvivesRestarts restarts the member under a
// subscription several times: each time its watch stream breaks and is
// opened again from the revision after the last it reported, so releases
// made while it reconnects are delivered too. Each broken stream also wakes
// the waiter once, in case it missed something; a wake-up left over from
// those can stand for one release, not for two.
func TestEtcdSubscriptionSurvivesRestarts(t *testing.T) {
	c, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	s := openEtcd(t, c.URL(), "ns")
	sub, err := s.Subscribe(call(t, storetest.HangGuard), "job", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.Members[0].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		select {
		case <-sub.Released(): // a wake-up left over from the restarts
		default:
		}
		storetest.Release(t, s, storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL)), leasestore.ResultCompleted)
		select {
		case <-sub.Released():
		case <-time.After(storetest.HangGuard):
			t.Fatalf("release %d after three restarts was not delivered", i+1)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case <-closed:
	case <-time.After(storetest.HangGuard):
		t.Fatal("Close hangs")
	}
}

// A member that restarts breaks every token watch's stream: each watch
// reports itself lost, reads the job again and follows it from that read,
// and the heartbeat fails while it cannot show that changes arrived.
func TestEtcdTokenFeedSurvivesRestarts(t *testing.T) {
	c, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	watcher, holder := leasestore.New(openEtcd(t, c.URL(), "ns")), openEtcd(t, c.URL(), "ns")
	log := storetest.Watch(t, watcher, "job")
	first := storetest.Acquire(t, holder, storetest.Request("job", "w1", storetest.LongTTL))
	log.Await(t, "of the first grant", storetest.IsState(first.Token, true))

	if err := c.Members[0].Kill(); err != nil {
		t.Fatal(err)
	}
	log.Await(t, "lost", func(st leasestore.TokenState) bool { return st.Lost })
	err = watcher.SyncTokens(call(t, 500*time.Millisecond))
	if !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("SyncTokens with the member down = %v, want ErrUnavailable", err)
	}
	if err := c.Members[0].Restart(); err != nil {
		t.Fatal(err)
	}
	storetest.Release(t, holder, first, leasestore.ResultCompleted)
	second := storetest.Acquire(t, holder, storetest.Request("job", "w2", storetest.LongTTL))
	deadline := time.Now().Add(storetest.HangGuard)
	for watcher.SyncTokens(call(t, time.Second)) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("SyncTokens still fails %s after the restart", storetest.HangGuard)
		}
	}
	if st, _ := log.Last(); !storetest.IsState(second.Token, true)(st) {
		t.Fatalf("after the restart and a heartbeat the newest state is %+v, want the grant of %d", st, second.Token)
	}
	states := log.States()
	lost := slices.IndexFunc(states, func(st leasestore.TokenState) bool { return st.Lost })
	if read := slices.IndexFunc(states[lost:], func(st leasestore.TokenState) bool { return st.Read }); read < 0 {
		t.Errorf("no read state after the watch was lost: %+v", states)
	}
}

// A record whose history no longer holds an event of its last token's run
// (twenty operator quarantines since the grant) says nothing of whether
// that run ended: the watch reads the job's keys instead.
func TestEtcdTokenFeedReadsWhenTheHistoryForgotTheRun(t *testing.T) {
	c := testEtcd.Get(t)
	ns := freshNamespace()
	watcher, holder := leasestore.New(openEtcd(t, c.URL(), ns)), openEtcd(t, c.URL(), ns)
	log := storetest.Watch(t, watcher, "job")
	l := storetest.Acquire(t, holder, storetest.Request("job", "w1", storetest.LongTTL))
	for i := range leasestore.HistoryLimit / 2 {
		note := leasestore.Note{By: "alice", Reason: fmt.Sprint(i)}
		if err := holder.Quarantine(t.Context(), "job", note); err != nil {
			t.Fatal(err)
		}
		if err := holder.ReleaseQuarantine(t.Context(), "job", note); err != nil {
			t.Fatal(err)
		}
	}
	if err := watcher.SyncTokens(call(t, storetest.HangGuard)); err != nil {
		t.Fatalf("SyncTokens: %v", err)
	}
	st, _ := log.Last()
	if !storetest.IsState(l.Token, true)(st) {
		t.Fatalf("newest state %+v, want token %d live", st, l.Token)
	}
	if !st.Read {
		t.Errorf("newest state %+v, want a read: the history no longer holds the grant", st)
	}
}
