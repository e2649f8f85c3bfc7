package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Harness makes the stores the suite tests, one fresh store per test.
type Harness interface {
	// NewStore makes an empty store for one test; everything it started is
	// cleaned up when t ends.
	NewStore(t testing.TB) Fixture
	// Abilities says which optional abilities the harness's stores have.
	Abilities() Abilities
}

// Fixture is one store made by a Harness.
type Fixture struct {
	// Open returns a new client of the store, as another process would
	// hold. The suite closes every client it opens.
	Open func(t testing.TB) leasestore.Store
	// Wipe loses all the store's data, as a restart without persistence
	// would (Redis FLUSHALL; embedded: the file deleted), so the suite
	// checks that tokens keep rising after the store lost its data; nil
	// when the harness cannot.
	Wipe func(t testing.TB)
}

// Abilities are what a store can optionally be put through.
type Abilities struct {
	// MinTTL is the shortest lease TTL the store honours (etcd: its
	// minimum lease TTL, 2 s by default); zero means no minimum. The leases
	// the suite lets expire last max(ShortTTL, MinTTL), and it waits for
	// the store to report them expired rather than for a fixed time.
	MinTTL time.Duration
	// CommonHistoryWords: the store writes the details of docs/semantics.md's
	// history events word for word. Every store should, so that status
	// reads alike whatever the store; the suite checks them only on a store
	// that says so (the registry's in front of a store reports that
	// store's words).
	CommonHistoryWords bool
	// Slots: the store keeps a queue of waiters and grants a job up to
	// this many slots (leasestore.Queuer); 0: neither, and the suite skips
	// their tests. Through a registry it is what the store behind it
	// keeps, which the remote store cannot know before it asks.
	Slots int
}

// shortTTL is the TTL of the leases the suite lets expire on this store.
func (a Abilities) shortTTL() time.Duration { return max(ShortTTL, a.MinTTL) }

// expiryGuard bounds the wait for a short lease to expire, to catch a store
// whose leases never do; a store may take a while past the TTL (etcd
// checks expiries every 500 ms).
func (a Abilities) expiryGuard() time.Duration { return 5*a.shortTTL() + HangGuard }

// Run runs the store contract (leasestore's Store documentation and
// docs/semantics.md) against the stores h makes, one subtest per rule, each
// on a fresh store.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		run  func(t *testing.T, h fixture)
	}{
		{"MutualExclusion", testMutualExclusion},
		{"Renew", testRenew},
		{"RenewExtendsEvidence", testRenewExtendsEvidence},
		{"ReleaseWithStaleTokenChangesNothing", testReleaseStale},
		{"ReleaseOutcomes", testReleaseOutcomes},
		{"TokensStrictlyIncrease", testTokensIncrease},
		{"AcquireIdempotentForTheHolder", testAcquireIdempotent},
		{"CrashCountedOnce", testCrashCountedOnce},
		{"QuarantineAtRunThreshold", testQuarantineThreshold},
		{"ManualQuarantine", testManualQuarantine},
		{"MinInterval", testMinInterval},
		{"Region", testRegion},
		{"Deadline", testDeadline},
		{"HistoryBounded", testHistoryBounded},
		{"HistoryDetails", testHistoryDetails},
		{"StatusLeasesCounts", testStatusLeasesCounts},
		{"CheckToken", testCheckToken},
		{"Subscribe", testSubscribe},
		{"TokenFeed", testTokenFeed},
		{"RenewKeepsTheRoundTrip", testRenewKeepsTheRoundTrip},
		{"RecordLateReleasesARunStillThere", testRecordLateReleases},
		{"RecordLateWithdrawsACountedCrash", testRecordLateWithdraws},
		{"RecordLateLiftsTheQuarantineItCaused", testRecordLateLiftsQuarantine},
		{"RecordLateCompletedEndsTheStreak", testRecordLateCompleted},
		{"RecordLateAbandonedGrant", testRecordLateAbandoned},
		{"Stop", testStop},
		{"Expect", testExpect},
		{"Jobs", testJobs},
		{"Slots", testSlots},
		{"SlotsMustAgree", testSlotsMustAgree},
		{"QueueOrder", testQueueOrder},
		{"WaiterVanishesMidQueue", testWaiterVanishes},
		{"WaiterLeaves", testWaiterLeaves},
		{"CrashCountedWhileOthersWait", testCrashWhileOthersWait},
		{"ScanCountsEachSlot", testScanCountsEachSlot},
		{"FollowsTheRules", testFollowsTheRules},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, fixture{h.NewStore(t), h.Abilities()}) })
	}
}

// fixture is the store of one test with its harness's abilities.
type fixture struct {
	Fixture
	Abilities
}

// crashRun acquires job with the store's short TTL and waits until the
// store reports the lease expired, as a SIGKILLed supervisor would leave it.
func (h fixture) crashRun(t *testing.T, s leasestore.Store, job, worker string, maxCrashes int) *leasestore.Lease {
	t.Helper()
	req := Request(job, worker, h.shortTTL())
	req.MaxCrashes = maxCrashes
	l := Acquire(t, s, req)
	h.awaitExpired(t, s, l)
	return l
}

// awaitExpired waits until the store no longer reports l as the job's live
// lease, which takes at least l.TTL from its grant.
func (h fixture) awaitExpired(t *testing.T, s leasestore.Store, l *leasestore.Lease) {
	t.Helper()
	time.Sleep(min(max(time.Until(l.GrantedAt.Add(l.TTL)), 0), l.TTL))
	for guard := time.Now().Add(h.expiryGuard()); ; time.Sleep(10 * time.Millisecond) {
		st := Status(t, s, l.Job)
		ofL := func(h leasestore.Holder) bool { return h.Token == l.Token }
		if (st.Holder == nil || !ofL(*st.Holder)) && !slices.ContainsFunc(st.Holders, ofL) {
			return
		}
		if time.Now().After(guard) {
			t.Fatalf("lease of %s (token %d, TTL %s) still live after %s", l.Job, l.Token, l.TTL, h.expiryGuard())
		}
	}
}

// client opens a client of f that is closed when the test ends.
func client(t testing.TB, f Fixture) leasestore.Store {
	t.Helper()
	s := f.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// errorAs returns err as an E, failing the test when it is not one.
func errorAs[E error](t *testing.T, err error) E {
	t.Helper()
	var target E
	if !errors.As(err, &target) {
		t.Fatalf("got error %v, want a %T", err, target)
	}
	return target
}

func lastEvent(t *testing.T, st *leasestore.JobStatus) leasestore.Event {
	t.Helper()
	if len(st.History) == 0 {
		t.Fatalf("job %s has no history", st.Job)
	}
	return st.History[len(st.History)-1]
}

// hasEvent reports whether history holds an event of kind for token.
func hasEvent(history []leasestore.Event, kind leasestore.EventKind, token int64) bool {
	return slices.ContainsFunc(history, func(e leasestore.Event) bool { return e.Kind == kind && e.Token == token })
}

func testMutualExclusion(t *testing.T, h fixture) {
	const n = 50
	clients := make([]leasestore.Store, n)
	for i := range clients {
		clients[i] = client(t, h.Fixture)
	}
	leases := make([]*leasestore.Lease, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			leases[i], errs[i] = clients[i].Acquire(Ctx(t), Request("job", fmt.Sprintf("w%d", i), LongTTL))
		})
	}
	close(start)
	wg.Wait()

	var winner *leasestore.Lease
	for i, l := range leases {
		if l == nil {
			continue
		}
		if winner != nil {
			t.Fatalf("two grants: %s token %d and %s token %d", winner.Holder, winner.Token, l.Holder, l.Token)
		}
		winner = l
		if errs[i] != nil {
			t.Errorf("worker %d got a lease and an error %v", i, errs[i])
		}
	}
	if winner == nil {
		t.Fatalf("no grant among %d acquirers; errors: %v", n, errs)
	}
	want := Request("job", winner.Holder, LongTTL)
	for i, err := range errs {
		if leases[i] != nil {
			continue
		}
		held := errorAs[*leasestore.HeldError](t, err)
		if held.Job != "job" || held.Holder != winner.Holder || held.Host != want.Host || held.PID != want.PID ||
			held.Token != winner.Token || !held.Since.Equal(winner.GrantedAt) {
			t.Errorf("worker %d: HeldError %+v does not describe the winner %+v", i, held, winner)
		}
		if held.ExpiresIn <= 0 || held.ExpiresIn > LongTTL {
			t.Errorf("worker %d: HeldError.ExpiresIn = %s, want in (0, %s]", i, held.ExpiresIn, LongTTL)
		}
	}
}

func testRenew(t *testing.T, h fixture) {
	s := client(t, h.Fixture)

	t.Run("live lease is extended", func(t *testing.T) {
		l := Acquire(t, s, Request("live", "a", LongTTL))
		before := Status(t, s, "live").Holder.ExpiresAt
		time.Sleep(10 * time.Millisecond)
		if err := s.Renew(Ctx(t), l); err != nil {
			t.Fatalf("Renew of a live lease: %v", err)
		}
		if after := Status(t, s, "live").Holder.ExpiresAt; !after.After(before) {
			t.Errorf("expiry after renew %s, want later than %s", after, before)
		}
	})

	t.Run("refused after expiry", func(t *testing.T) {
		l := h.crashRun(t, s, "expired", "a", 3)
		if err := s.Renew(Ctx(t), l); !errors.Is(err, leasestore.ErrLeaseLost) {
			t.Fatalf("Renew after expiry = %v, want ErrLeaseLost", err)
		}
		st := Status(t, s, "expired")
		if !hasEvent(st.History, leasestore.EventLeaseLost, l.Token) {
			t.Errorf("history %+v has no lease-lost event for token %d", st.History, l.Token)
		}
		if st.State != leasestore.StateCrashed {
			t.Errorf("state after a refused renew = %s, want %s (the run is still unaccounted)", st.State, leasestore.StateCrashed)
		}
	})

	t.Run("refused after another holder took over", func(t *testing.T) {
		old := h.crashRun(t, s, "taken", "a", 3)
		other := client(t, h.Fixture)
		cur := Acquire(t, other, Request("taken", "b", LongTTL))
		if err := s.Renew(Ctx(t), old); !errors.Is(err, leasestore.ErrLeaseLost) {
			t.Fatalf("Renew of the replaced lease = %v, want ErrLeaseLost", err)
		}
		if err := other.CheckToken(Ctx(t), "taken", cur.Token); err != nil {
			t.Errorf("the new holder's token after the old one's renew: %v", err)
		}
	})

	t.Run("refused for another holder with the same job", func(t *testing.T) {
		l := Acquire(t, s, Request("impostor", "a", LongTTL))
		forged := *l
		forged.Holder = "b"
		if err := s.Renew(Ctx(t), &forged); !errors.Is(err, leasestore.ErrLeaseLost) {
			t.Fatalf("Renew by a holder that does not hold the lease = %v, want ErrLeaseLost", err)
		}
		// Not the run's own evidence: no lease-lost event (that is for
		// the holder's renewal after its liveness expired).
		if st := Status(t, s, "impostor"); hasEvent(st.History, leasestore.EventLeaseLost, l.Token) {
			t.Errorf("history %+v: a renewal under another holder's name recorded a lease-lost event", st.History)
		}
	})
}

func testRenewExtendsEvidence(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// Renewals come every ttl/4, and the liveness expires 900ms (at least)
	// before the renewed evidence would: margins for a busy machine.
	ttl := max(600*time.Millisecond, h.MinTTL)
	evidence := ttl * 5 / 2
	req := Request("job", "a", ttl)
	req.EvidenceTTL = evidence
	l := Acquire(t, s, req)
	// Renew until well past the evidence's original expiry.
	last := time.Now()
	for end := time.Now().Add(evidence + 500*time.Millisecond); time.Now().Before(end); {
		time.Sleep(ttl / 4)
		if err := s.Renew(Ctx(t), l); err != nil {
			t.Fatalf("Renew %s after the previous one: %v", time.Since(last), err)
		}
		last = time.Now()
	}
	// Let the liveness lapse; the evidence, renewed with it, must remain.
	h.awaitExpired(t, s, l)
	st := Status(t, s, "job")
	if st.State != leasestore.StateCrashed || st.Crashed == nil || st.Crashed.Token != l.Token {
		t.Fatalf("state %s, crashed %+v: want %s with the run's evidence (token %d) outliving its original TTL",
			st.State, st.Crashed, leasestore.StateCrashed, l.Token)
	}
}

func testReleaseStale(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	old := h.crashRun(t, s, "job", "a", 3)
	cur := Acquire(t, s, Request("job", "b", LongTTL))
	before := Status(t, s, "job")

	if err := s.Release(Ctx(t), old, Outcome(leasestore.ResultCompleted)); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("Release with the previous token = %v, want ErrLeaseLost", err)
	}
	forged := *cur
	forged.Token = cur.Token + 1
	if err := s.Release(Ctx(t), &forged, Outcome(leasestore.ResultCrashed)); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("Release with a token never granted = %v, want ErrLeaseLost", err)
	}

	after := Status(t, s, "job")
	if after.State != leasestore.StateRunning || after.Holder == nil || after.Holder.Token != cur.Token {
		t.Fatalf("after stale releases: state %s holder %+v, want %s by token %d", after.State, after.Holder, leasestore.StateRunning, cur.Token)
	}
	if after.LastToken != before.LastToken || after.Crashes != before.Crashes || after.Attempts != before.Attempts ||
		after.LastOutcome != nil || !after.LastSuccess.IsZero() || len(after.History) != len(before.History) {
		t.Errorf("stale releases changed the record:\nbefore %+v\nafter  %+v", before, after)
	}
	if err := s.CheckToken(Ctx(t), "job", cur.Token); err != nil {
		t.Errorf("the current holder's token after stale releases: %v", err)
	}
	if err := s.Release(Ctx(t), &leasestore.Lease{Job: "never-seen", Holder: "x", Token: 1}, Outcome(leasestore.ResultCompleted)); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Errorf("Release on a job never granted = %v, want ErrLeaseLost", err)
	}
}

func testReleaseOutcomes(t *testing.T, h fixture) {
	tests := []struct {
		result      leasestore.Result
		wantCrashes int // starting from one counted crash
		wantSuccess bool
		wantKind    leasestore.EventKind
	}{
		{leasestore.ResultCompleted, 0, true, leasestore.EventReleased},
		{leasestore.ResultFailed, 1, false, leasestore.EventReleased},
		{leasestore.ResultCrashed, 2, false, leasestore.EventCrashed},
		{leasestore.ResultNotStarted, 1, false, leasestore.EventReleased},
	}
	s := client(t, h.Fixture)
	// Every job starts with one counted crash.
	var crashed []*leasestore.Lease
	for _, tc := range tests {
		req := Request("job-"+string(tc.result), "crasher", h.shortTTL())
		req.MaxCrashes = 5
		crashed = append(crashed, Acquire(t, s, req))
	}
	for _, l := range crashed {
		h.awaitExpired(t, s, l)
	}
	if found, err := s.Scan(Ctx(t)); err != nil || len(found) != len(tests) {
		t.Fatalf("Scan = %+v, %v; want %d crashes", found, err, len(tests))
	}
	for _, tc := range tests {
		t.Run(string(tc.result), func(t *testing.T) {
			job := "job-" + string(tc.result)
			l := Acquire(t, s, Request(job, "a", LongTTL))
			out := Outcome(tc.result)
			if err := s.Release(Ctx(t), l, out); err != nil {
				t.Fatalf("Release: %v", err)
			}

			st := Status(t, s, job)
			if st.Crashes != tc.wantCrashes {
				t.Errorf("crashes after %s = %d, want %d", tc.result, st.Crashes, tc.wantCrashes)
			}
			if got := !st.LastSuccess.IsZero(); got != tc.wantSuccess {
				t.Errorf("last success set after %s = %v, want %v", tc.result, got, tc.wantSuccess)
			}
			if lo := st.LastOutcome; lo == nil || lo.Outcome != out || lo.Worker != "a" || lo.Token != l.Token || lo.FinishedAt.IsZero() {
				t.Errorf("last outcome %+v, want %+v by a with token %d", lo, out, l.Token)
			}
			if e := lastEvent(t, st); e.Kind != tc.wantKind || e.Token != l.Token || e.Worker != "a" {
				t.Errorf("last event %+v, want %s by a with token %d", e, tc.wantKind, l.Token)
			}
			if st.State != leasestore.StateIdle || st.Holder != nil {
				t.Errorf("state after release %s (holder %+v), want %s", st.State, st.Holder, leasestore.StateIdle)
			}
			// The job is free at once, and nothing is left to count.
			next := Acquire(t, s, Request(job, "b", LongTTL))
			if next.Recovered != nil {
				t.Errorf("Acquire after a %s release recovered a crash: %+v", tc.result, next.Recovered)
			}
			if st := Status(t, s, job); st.Crashes != tc.wantCrashes {
				t.Errorf("crashes after the next acquire = %d, want %d", st.Crashes, tc.wantCrashes)
			}
		})
	}

	t.Run("crashed at the threshold quarantines", func(t *testing.T) {
		req := Request("poison", "a", LongTTL)
		req.MaxCrashes = 2
		Release(t, s, Acquire(t, s, req), leasestore.ResultCrashed)
		l := Acquire(t, s, req)
		Release(t, s, l, leasestore.ResultCrashed)
		st := Status(t, s, "poison")
		if st.State != leasestore.StateQuarantined || st.Crashes != 2 || st.Quarantine == nil || st.Quarantine.LastHolder != "a" {
			t.Fatalf("after 2 crashed releases with max 2: state %s crashes %d quarantine %+v", st.State, st.Crashes, st.Quarantine)
		}
	})
}

func testTokensIncrease(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	var last int64
	grant := func(worker string) *leasestore.Lease {
		t.Helper()
		l := Acquire(t, s, Request("job", worker, LongTTL))
		if l.Token <= last {
			t.Fatalf("grant to %s: token %d, not above the previous %d", worker, l.Token, last)
		}
		last = l.Token
		return l
	}
	for i := range 5 {
		Release(t, s, grant(fmt.Sprintf("w%d", i)), leasestore.ResultCompleted)
	}

	if h.Fixture.Wipe == nil {
		return
	}
	h.Fixture.Wipe(t)
	Release(t, s, grant("after-wipe"), leasestore.ResultCompleted)

	grant("held")
	h.Fixture.Wipe(t)
	l := grant("after-wipe-while-held")
	if st := Status(t, s, "job"); st.LastToken != l.Token {
		t.Errorf("LastToken %d, want %d", st.LastToken, l.Token)
	}
}

// testAcquireIdempotent asks again for a lease already held, as a client
// whose answer was lost would: it gets the same lease back, renewed, and
// nothing else changes.
func testAcquireIdempotent(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	req := Request("job", "a", LongTTL)
	first := Acquire(t, s, req)
	before := Status(t, s, "job")
	time.Sleep(10 * time.Millisecond)

	again := Acquire(t, client(t, h.Fixture), req)
	if again.Token != first.Token || again.Attempt != first.Attempt || again.Holder != first.Holder || again.Recovered != nil {
		t.Fatalf("second Acquire by the holder = %+v, want the first lease %+v back", again, first)
	}
	after := Status(t, s, "job")
	if after.Holder == nil || !after.Holder.ExpiresAt.After(before.Holder.ExpiresAt) {
		t.Errorf("expiry %v after the second Acquire, want later than %s: it renews the lease", after.Holder, before.Holder.ExpiresAt)
	}
	if after.Attempts != before.Attempts || after.LastToken != before.LastToken || len(after.History) != len(before.History) {
		t.Errorf("the second Acquire wrote: before attempts %d token %d %d events, after %d, %d, %d events",
			before.Attempts, before.LastToken, len(before.History), after.Attempts, after.LastToken, len(after.History))
	}
	if err := s.Renew(Ctx(t), first); err != nil {
		t.Errorf("Renew of the first answer's lease: %v", err)
	}
	Release(t, s, again, leasestore.ResultCompleted)

	other := req
	other.Holder = "b"
	l := Acquire(t, s, other)
	_, err := s.Acquire(Ctx(t), req)
	if held := errorAs[*leasestore.HeldError](t, err); held.Holder != "b" || held.Token != l.Token {
		t.Errorf("Acquire by a past holder while b holds the job: %+v, want held by b with token %d", held, l.Token)
	}
}

func testCrashCountedOnce(t *testing.T, h fixture) {
	const racers = 20
	crashed := h.crashRun(t, client(t, h.Fixture), "job", "crasher", 10)
	clients := make([]leasestore.Store, racers)
	for i := range clients {
		clients[i] = client(t, h.Fixture)
	}
	var (
		mu      sync.Mutex
		counted []leasestore.Crash
		grants  int
	)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			if i%2 == 0 {
				found, err := clients[i].Scan(Ctx(t))
				if err != nil {
					t.Errorf("Scan: %v", err)
				}
				mu.Lock()
				counted = append(counted, found...)
				mu.Unlock()
				return
			}
			l, err := clients[i].Acquire(Ctx(t), Request("job", fmt.Sprintf("w%d", i), LongTTL))
			var held *leasestore.HeldError
			switch {
			case err == nil:
				mu.Lock()
				grants++
				if l.Recovered != nil {
					counted = append(counted, *l.Recovered)
				}
				mu.Unlock()
			case !errors.As(err, &held):
				t.Errorf("Acquire: %v, want a grant or *HeldError", err)
			}
		})
	}
	close(start)
	wg.Wait()

	if grants != 1 {
		t.Errorf("%d grants, want exactly 1", grants)
	}
	if len(counted) != 1 {
		t.Fatalf("the crash was reported %d times (%+v), want once", len(counted), counted)
	}
	c := counted[0]
	if c.Job != "job" || c.Holder != "crasher" || c.Token != crashed.Token || c.Host != "host-crasher" ||
		c.Crashes != 1 || c.Quarantined || !c.StartedAt.Equal(crashed.GrantedAt) ||
		c.StaleSince.Before(crashed.GrantedAt) || c.DetectedAt.Before(c.StaleSince) {
		t.Errorf("crash record %+v does not describe the crashed run %+v", c, crashed)
	}
	st := Status(t, clients[0], "job")
	if st.Crashes != 1 {
		t.Errorf("crash count %d, want 1", st.Crashes)
	}
	if n := len(slices.DeleteFunc(slices.Clone(st.History), func(e leasestore.Event) bool { return e.Kind != leasestore.EventCrashed })); n != 1 {
		t.Errorf("%d crashed events in history, want 1", n)
	}
}

func testQuarantineThreshold(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// The detector's own threshold (100) must not matter: the crashed run
	// was started with 2.
	detector := Request("job", "detector", LongTTL)
	detector.MaxCrashes = 100

	h.crashRun(t, s, "job", "c1", 2)
	found, err := s.Scan(Ctx(t))
	if err != nil || len(found) != 1 || found[0].Crashes != 1 || found[0].Quarantined {
		t.Fatalf("first crash: Scan = %+v, %v; want one crash, not quarantined", found, err)
	}
	last := h.crashRun(t, s, "job", "c2", 2)
	_, err = s.Acquire(Ctx(t), detector)
	q := errorAs[*leasestore.QuarantinedError](t, err)
	if q.Job != "job" || q.Crashes != 2 || q.By != "leasectl" || q.LastHolder != "c2" || q.LastHost != "host-c2" ||
		q.Since.IsZero() || !strings.Contains(q.Reason, "2") {
		t.Errorf("QuarantinedError %+v, want job quarantined by leasectl after 2 crashes of c2", q.Quarantine)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateQuarantined || st.Crashes != 2 || st.Holder != nil {
		t.Errorf("status %s crashes %d holder %+v, want %s with 2 crashes and no holder", st.State, st.Crashes, st.Holder, leasestore.StateQuarantined)
	}
	if !hasEvent(st.History, leasestore.EventCrashed, last.Token) || !hasEvent(st.History, leasestore.EventQuarantined, last.Token) {
		t.Errorf("history %+v lacks the crash and the quarantine of token %d", st.History, last.Token)
	}
	list, err := s.Quarantined(Ctx(t))
	if err != nil || len(list) != 1 || list[0].Job != "job" || list[0].Crashes != 2 {
		t.Errorf("Quarantined() = %+v, %v; want the job with 2 crashes", list, err)
	}
	if c, err := s.Counts(Ctx(t)); err != nil || c.Quarantined != 1 || c.InFlight != 0 {
		t.Errorf("Counts() = %+v, %v; want 1 quarantined, 0 in flight", c, err)
	}
	_, err = s.Acquire(Ctx(t), detector)
	errorAs[*leasestore.QuarantinedError](t, err)

	note := leasestore.Note{By: "oncall", Reason: "fixed the input"}
	if err := s.ReleaseQuarantine(Ctx(t), "job", note); err != nil {
		t.Fatalf("ReleaseQuarantine: %v", err)
	}
	st = Status(t, s, "job")
	if st.State != leasestore.StateIdle || st.Crashes != 0 || st.Quarantine != nil {
		t.Errorf("after release: state %s crashes %d quarantine %+v, want %s, 0, none", st.State, st.Crashes, st.Quarantine, leasestore.StateIdle)
	}
	if e := lastEvent(t, st); e.Kind != leasestore.EventUnquarantine || !strings.Contains(e.Detail, note.By) || !strings.Contains(e.Detail, note.Reason) {
		t.Errorf("last event %+v, want %s naming %q and %q", e, leasestore.EventUnquarantine, note.By, note.Reason)
	}
	if err := s.ReleaseQuarantine(Ctx(t), "job", note); !errors.Is(err, leasestore.ErrNotQuarantined) {
		t.Errorf("second ReleaseQuarantine = %v, want ErrNotQuarantined", err)
	}
	if list, err := s.Quarantined(Ctx(t)); err != nil || len(list) != 0 {
		t.Errorf("Quarantined() after release = %+v, %v; want none", list, err)
	}
	Acquire(t, s, detector)
}

func testManualQuarantine(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	first := leasestore.Note{By: "alice", Reason: "bad deploy"}
	if err := s.Quarantine(Ctx(t), "never-seen", first); err != nil {
		t.Fatalf("Quarantine of a job the store never saw: %v", err)
	}
	_, err := s.Acquire(Ctx(t), Request("never-seen", "a", LongTTL))
	q := errorAs[*leasestore.QuarantinedError](t, err)
	if q.By != first.By || q.Reason != first.Reason || q.Since.IsZero() {
		t.Errorf("QuarantinedError %+v, want by %q reason %q", q.Quarantine, first.By, first.Reason)
	}

	time.Sleep(10 * time.Millisecond)
	second := leasestore.Note{By: "bob", Reason: "still bad"}
	if err := s.Quarantine(Ctx(t), "never-seen", second); err != nil {
		t.Fatalf("second Quarantine: %v", err)
	}
	st := Status(t, s, "never-seen")
	if st.State != leasestore.StateQuarantined || st.Quarantine == nil || !st.Quarantine.Since.Equal(q.Since) || st.Quarantine.Reason != second.Reason {
		t.Errorf("after a second Quarantine: %+v, want since %s kept and reason %q", st.Quarantine, q.Since, second.Reason)
	}
	if e := lastEvent(t, st); e.Kind != leasestore.EventQuarantined || !strings.Contains(e.Detail, second.By) || !strings.Contains(e.Detail, second.Reason) {
		t.Errorf("last event %+v, want %s naming %q and %q", e, leasestore.EventQuarantined, second.By, second.Reason)
	}
	if err := s.ReleaseQuarantine(Ctx(t), "other", first); !errors.Is(err, leasestore.ErrNotQuarantined) {
		t.Errorf("ReleaseQuarantine of a job never quarantined = %v, want ErrNotQuarantined", err)
	}

	// A crash that reaches its run's threshold under an operator's
	// quarantine did not quarantine the job: the operator's stays.
	req := Request("crashed", "c1", LongTTL)
	req.MaxCrashes = 2
	Release(t, s, Acquire(t, s, req), leasestore.ResultCrashed)
	crashed := h.crashRun(t, s, "crashed", "c2", 2)
	if err := s.Quarantine(Ctx(t), "crashed", first); err != nil {
		t.Fatalf("Quarantine: %v", err)
	}
	found, err := s.Scan(Ctx(t))
	if err != nil || len(found) != 1 || found[0].Token != crashed.Token || found[0].Crashes != 2 || found[0].Quarantined {
		t.Errorf("Scan under an operator's quarantine = %+v, %v; want the crash of token %d, 2 crashes, not the one that quarantined the job",
			found, err, crashed.Token)
	}
	if st := Status(t, s, "crashed"); st.Quarantine == nil || st.Quarantine.By != first.By {
		t.Errorf("quarantine after the crash was counted: %+v, want %s's kept", st.Quarantine, first.By)
	}
}

func testMinInterval(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	Release(t, s, Acquire(t, s, Request("job", "a", LongTTL)), leasestore.ResultCompleted)
	before := Status(t, s, "job")

	req := Request("job", "b", LongTTL)
	req.MinInterval = time.Hour
	_, err := s.Acquire(Ctx(t), req)
	soon := errorAs[*leasestore.TooSoonError](t, err)
	if soon.Job != "job" || soon.MinInterval != time.Hour || !soon.LastSuccess.Equal(before.LastSuccess) ||
		soon.Age < 0 || soon.Age > time.Minute {
		t.Errorf("TooSoonError %+v, want last success %s, age under a minute", soon, before.LastSuccess)
	}
	if after := Status(t, s, "job"); after.Attempts != before.Attempts || after.LastToken != before.LastToken ||
		len(after.History) != len(before.History) {
		t.Errorf("a too-soon refusal wrote: before %+v, after %+v", before, after)
	}

	time.Sleep(50 * time.Millisecond)
	req.MinInterval = 10 * time.Millisecond
	l := Acquire(t, s, req)
	Release(t, s, l, leasestore.ResultFailed)
	req.MinInterval = time.Hour
	_, err = s.Acquire(Ctx(t), req)
	errorAs[*leasestore.TooSoonError](t, err)

	req.Job = "never-completed"
	Acquire(t, s, req)
}

// testRegion checks regional isolation: the first grant that
// names a region records it, and requests from other regions are refused
// without changing anything, whether the job is held or free.
func testRegion(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	inRegion := func(job, worker, region string) leasestore.AcquireRequest {
		req := Request(job, worker, LongTTL)
		req.Region = region
		return req
	}
	wantRegionError := func(t *testing.T, err error, job, region, requested string) {
		t.Helper()
		e := errorAs[*leasestore.RegionError](t, err)
		if e.Job != job || e.Region != region || e.Requested != requested {
			t.Errorf("RegionError %+v, want job %s of region %s asked from %s", e, job, region, requested)
		}
	}

	held := Acquire(t, s, inRegion("job", "a", "us-east-1"))
	if st := Status(t, s, "job"); st.Region != "us-east-1" {
		t.Fatalf("region after the first grant = %q, want us-east-1", st.Region)
	}
	before := Status(t, s, "job")
	_, err := s.Acquire(Ctx(t), inRegion("job", "b", "eu-west-1"))
	wantRegionError(t, err, "job", "us-east-1", "eu-west-1")
	Release(t, s, held, leasestore.ResultFailed)

	_, err = s.Acquire(Ctx(t), inRegion("job", "b", "eu-west-1"))
	wantRegionError(t, err, "job", "us-east-1", "eu-west-1")
	if after := Status(t, s, "job"); after.Attempts != before.Attempts || after.LastToken != before.LastToken ||
		len(after.History) != len(before.History)+1 || after.Region != "us-east-1" {
		t.Errorf("a refusal for another region wrote: before %+v, after %+v", before, after)
	}
	Release(t, s, Acquire(t, s, inRegion("job", "c", "us-east-1")), leasestore.ResultCompleted)
	// A request naming no region is not restricted, and changes no region.
	Acquire(t, s, inRegion("job", "d", ""))
	if st := Status(t, s, "job"); st.Region != "us-east-1" {
		t.Errorf("region after a grant naming none = %q, want us-east-1 kept", st.Region)
	}

	// A job granted before without a region takes the first one named.
	Release(t, s, Acquire(t, s, inRegion("free", "a", "")), leasestore.ResultCompleted)
	if st := Status(t, s, "free"); st.Region != "" {
		t.Errorf("region of a job never granted with one = %q, want none", st.Region)
	}
	Acquire(t, s, inRegion("free", "b", "eu-west-1"))
	if st := Status(t, s, "free"); st.Region != "eu-west-1" {
		t.Errorf("region after the first grant naming one = %q, want eu-west-1", st.Region)
	}
}

// testDeadline checks the hard deadline (ttl_deadline): past it, Acquire refuses,
// after counting a crash it found; before it, and for the holder of the
// live lease, Acquire grants as usual.
func testDeadline(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	withDeadline := func(worker string, ttl time.Duration, deadline time.Time) leasestore.AcquireRequest {
		req := Request("job", worker, ttl)
		req.Deadline = deadline
		return req
	}
	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	past := time.Now().Add(-time.Minute).Truncate(time.Millisecond)

	l := Acquire(t, s, withDeadline("a", LongTTL, future))
	if again := Acquire(t, s, withDeadline("a", LongTTL, past)); again.Token != l.Token {
		t.Errorf("the holder's own Acquire past the deadline = token %d, want its lease %d back", again.Token, l.Token)
	}
	Release(t, s, l, leasestore.ResultFailed)

	before := Status(t, s, "job")
	_, err := s.Acquire(Ctx(t), withDeadline("b", LongTTL, past))
	e := errorAs[*leasestore.DeadlineError](t, err)
	if e.Job != "job" || !e.Deadline.Equal(past) || !e.Now.After(past) {
		t.Errorf("DeadlineError %+v, want job with deadline %s and the store's clock after it", e, past)
	}
	if after := Status(t, s, "job"); after.Attempts != before.Attempts || after.LastToken != before.LastToken ||
		len(after.History) != len(before.History) {
		t.Errorf("a refusal past the deadline wrote: before %+v, after %+v", before, after)
	}

	crashed := h.crashRun(t, s, "late", "c", 3)
	_, err = s.Acquire(Ctx(t), leasestore.AcquireRequest{Job: "late", Holder: "d", TTL: LongTTL, EvidenceTTL: EvidenceTTL, MaxCrashes: 3, Deadline: past})
	errorAs[*leasestore.DeadlineError](t, err)
	if st := Status(t, s, "late"); st.Crashes != 1 || !hasEvent(st.History, leasestore.EventCrashed, crashed.Token) {
		t.Errorf("after a refusal past the deadline: crashes %d, history %+v; want the crash of token %d counted",
			st.Crashes, st.History, crashed.Token)
	}
}

func testHistoryBounded(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	var last *leasestore.Lease
	for i := range leasestore.HistoryLimit {
		last = Acquire(t, s, Request("job", fmt.Sprintf("w%d", i), LongTTL))
		Release(t, s, last, leasestore.ResultCompleted)
	}
	st := Status(t, s, "job")
	if len(st.History) != leasestore.HistoryLimit {
		t.Fatalf("history has %d events, want %d", len(st.History), leasestore.HistoryLimit)
	}
	for i := 1; i < len(st.History); i++ {
		if st.History[i].At.Before(st.History[i-1].At) {
			t.Errorf("history not oldest first at %d: %s before %s", i, st.History[i].At, st.History[i-1].At)
		}
	}
	if e := lastEvent(t, st); e.Kind != leasestore.EventReleased || e.Token != last.Token || e.Worker != last.Holder {
		t.Errorf("newest event %+v, want the release of token %d", e, last.Token)
	}
	if first := st.History[0]; first.Worker != fmt.Sprintf("w%d", leasestore.HistoryLimit/2) || first.Kind != leasestore.EventAcquired {
		t.Errorf("oldest kept event %+v, want the acquire of w%d", first, leasestore.HistoryLimit/2)
	}
}

// testHistoryDetails holds every store to the same words in every history
// event (docs/semantics.md, History events), so that status and quarantine
// show read alike whatever the store.
func testHistoryDetails(t *testing.T, h fixture) {
	if !h.CommonHistoryWords {
		t.Skip("the store does not declare Abilities.CommonHistoryWords yet")
	}
	s := client(t, h.Fixture)
	want := func(what string, kind leasestore.EventKind, worker string, token int64, detail string) {
		t.Helper()
		e := lastEvent(t, Status(t, s, "job"))
		if e.Kind != kind || e.Worker != worker || e.Token != token || e.Detail != detail {
			t.Errorf("%s: last event %+v, want %s by %q, token %d, detail %q", what, e, kind, worker, token, detail)
		}
	}
	l := Acquire(t, s, Request("job", "w1", LongTTL))
	want("a grant", leasestore.EventAcquired, "w1", l.Token, "attempt 1")
	out := Outcome(leasestore.ResultFailed)
	out.Reason = "max-runtime"
	if err := s.Release(Ctx(t), l, out); err != nil {
		t.Fatal(err)
	}
	want("a release", leasestore.EventReleased, "w1", l.Token, out.Detail())

	crashed := h.crashRun(t, s, "job", "w2", 2)
	if _, err := s.Scan(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	want("a crash found by scan", leasestore.EventCrashed, "w2", crashed.Token, "supervisor vanished: liveness expired, found by scan")

	note := leasestore.Note{By: "alice@ops-1", Reason: "bad input"}
	if err := s.Quarantine(Ctx(t), "job", note); err != nil {
		t.Fatal(err)
	}
	want("an operator's quarantine", leasestore.EventQuarantined, note.By, 0, "by alice@ops-1: bad input")
	note.Reason = "input fixed"
	if err := s.ReleaseQuarantine(Ctx(t), "job", note); err != nil {
		t.Fatal(err)
	}
	want("a release from quarantine", leasestore.EventUnquarantine, note.By, 0, "by alice@ops-1: input fixed")

	first := h.crashRun(t, s, "job", "w3", 2)
	l = Acquire(t, s, Request("job", "w4", LongTTL))
	st := Status(t, s, "job")
	if i := slices.IndexFunc(st.History, func(e leasestore.Event) bool { return e.Kind == leasestore.EventCrashed && e.Token == first.Token }); i < 0 ||
		st.History[i].Detail != "supervisor vanished: liveness expired, found by acquire" {
		t.Errorf("history %+v: want w3's crash, found by acquire", st.History)
	}
	Release(t, s, l, leasestore.ResultCompleted)

	h.crashRun(t, s, "job", "w5", 2)
	last := h.crashRun(t, s, "job", "w6", 2) // counts w5's crash, then crashes itself
	if _, err := s.Scan(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	want("a quarantine at the threshold", leasestore.EventQuarantined, "w6", last.Token, "by leasectl: 2 consecutive crashes")
}

func testStatusLeasesCounts(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	st := Status(t, s, "never-seen")
	if st.State != leasestore.StateIdle || st.Holder != nil || st.Crashed != nil || st.Quarantine != nil || st.LastOutcome != nil ||
		st.LastToken != 0 || st.Attempts != 0 || st.Crashes != 0 || len(st.History) != 0 || st.Now.IsZero() {
		t.Errorf("a job never seen: %+v, want IDLE with zero values and the store's clock", st)
	}

	leases := map[string]*leasestore.Lease{}
	for _, job := range []string{"b", "a", "c"} {
		leases[job] = Acquire(t, s, Request(job, "w-"+job, LongTTL))
	}
	crashed := h.crashRun(t, s, "d", "w-d", 3)
	if err := s.Quarantine(Ctx(t), "e", leasestore.Note{By: "alice", Reason: "off"}); err != nil {
		t.Fatalf("Quarantine: %v", err)
	}

	st = Status(t, s, "a")
	want := Request("a", "w-a", LongTTL)
	if st.State != leasestore.StateRunning || st.Holder == nil {
		t.Fatalf("state %s holder %+v, want %s with a holder", st.State, st.Holder, leasestore.StateRunning)
	}
	hd := st.Holder
	if hd.Worker != want.Holder || hd.Host != want.Host || hd.PID != want.PID || hd.Token != leases["a"].Token ||
		hd.Attempt != 1 || !slices.Equal(hd.Command, want.Command) || !hd.StartedAt.Equal(leases["a"].GrantedAt) {
		t.Errorf("holder %+v does not describe the lease %+v", hd, leases["a"])
	}
	if left := hd.ExpiresAt.Sub(st.Now); left <= 0 || left > LongTTL {
		t.Errorf("TTL left %s, want in (0, %s]", left, LongTTL)
	}
	if st.LastToken != leases["a"].Token || st.Attempts != 1 || st.MaxCrashes != want.MaxCrashes {
		t.Errorf("record: last token %d attempts %d max crashes %d", st.LastToken, st.Attempts, st.MaxCrashes)
	}

	st = Status(t, s, "d")
	if st.State != leasestore.StateCrashed || st.Holder != nil || st.Crashed == nil || st.Crashed.Holder != "w-d" ||
		st.Crashed.Token != crashed.Token || st.Crashes != 0 {
		t.Errorf("crashed job: state %s holder %+v crashed %+v crashes %d, want %s with uncounted evidence of token %d",
			st.State, st.Holder, st.Crashed, st.Crashes, leasestore.StateCrashed, crashed.Token)
	}
	if st := Status(t, s, "e"); st.State != leasestore.StateQuarantined {
		t.Errorf("quarantined job: state %s", st.State)
	}

	list, err := s.Leases(Ctx(t))
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	var jobs []string
	for _, l := range list {
		jobs = append(jobs, l.Job)
		if l.Token != leases[l.Job].Token || l.Worker != "w-"+l.Job {
			t.Errorf("listed lease %+v, want token %d of w-%s", l, leases[l.Job].Token, l.Job)
		}
		if left := l.ExpiresAt.Sub(l.ReadAt); l.ReadAt.Before(l.StartedAt) || left <= 0 || left > want.TTL {
			t.Errorf("listed lease %s read at %s, started %s, expires %s: want the store's clock, with 0 < TTL left <= %s",
				l.Job, l.ReadAt, l.StartedAt, l.ExpiresAt, want.TTL)
		}
	}
	if !slices.Equal(jobs, []string{"a", "b", "c"}) {
		t.Errorf("Leases() jobs %v, want [a b c] (live only, ordered by job)", jobs)
	}
	if c, err := s.Counts(Ctx(t)); err != nil || c != (leasestore.Counts{InFlight: 3, Quarantined: 1}) {
		t.Errorf("Counts() = %+v, %v; want 3 in flight, 1 quarantined", c, err)
	}

	Release(t, s, leases["b"], leasestore.ResultCompleted)
	if st := Status(t, s, "b"); st.State != leasestore.StateIdle || st.LastOutcome == nil || st.LastSuccess.IsZero() {
		t.Errorf("released job: state %s last outcome %+v last success %s", st.State, st.LastOutcome, st.LastSuccess)
	}
	if c, err := s.Counts(Ctx(t)); err != nil || c.InFlight != 2 {
		t.Errorf("Counts() after a release = %+v, %v; want 2 in flight", c, err)
	}
}

func testCheckToken(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	stale := func(err error, token, current int64, live bool) {
		t.Helper()
		e := errorAs[*leasestore.StaleTokenError](t, err)
		if e.Job != "job" || e.Token != token || e.Current != current || e.Live != live {
			t.Errorf("StaleTokenError %+v, want token %d current %d live %v", e, token, current, live)
		}
	}
	stale(s.CheckToken(Ctx(t), "job", 1), 1, 0, false)

	prev := h.crashRun(t, s, "job", "a", 3)
	stale(s.CheckToken(Ctx(t), "job", prev.Token), prev.Token, prev.Token, false)

	cur := Acquire(t, s, Request("job", "b", LongTTL))
	if err := s.CheckToken(Ctx(t), "job", cur.Token); err != nil {
		t.Errorf("CheckToken of the current live token: %v", err)
	}
	stale(s.CheckToken(Ctx(t), "job", prev.Token), prev.Token, cur.Token, true)
	stale(s.CheckToken(Ctx(t), "job", cur.Token+1), cur.Token+1, cur.Token, true)

	Release(t, s, cur, leasestore.ResultCompleted)
	stale(s.CheckToken(Ctx(t), "job", cur.Token), cur.Token, cur.Token, false)
}

func testSubscribe(t *testing.T, h fixture) {
	waiter := client(t, h.Fixture)
	holder := client(t, h.Fixture)
	awaitRelease := func(t *testing.T, sub leasestore.Subscription, what string) {
		t.Helper()
		select {
		case <-sub.Released():
		case <-time.After(HangGuard):
			t.Fatalf("no release notification within %s after %s", HangGuard, what)
		}
	}
	subscribe := func(t *testing.T, job string) leasestore.Subscription {
		t.Helper()
		sub, err := waiter.Subscribe(Ctx(t), job)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		return sub
	}

	t.Run("release", func(t *testing.T) {
		l := Acquire(t, holder, Request("job", "a", LongTTL))
		sub := subscribe(t, "job")
		Release(t, holder, l, leasestore.ResultCompleted)
		awaitRelease(t, sub, "a release")
		Acquire(t, waiter, Request("job", "b", LongTTL))
	})

	t.Run("crash counted", func(t *testing.T) {
		h.crashRun(t, holder, "crashed", "a", 3)
		sub := subscribe(t, "crashed")
		if _, err := holder.Scan(Ctx(t)); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		awaitRelease(t, sub, "a crash was counted")
	})

	t.Run("quarantine released", func(t *testing.T) {
		if err := holder.Quarantine(Ctx(t), "quarantined", leasestore.Note{By: "alice", Reason: "r"}); err != nil {
			t.Fatalf("Quarantine: %v", err)
		}
		sub := subscribe(t, "quarantined")
		if err := holder.ReleaseQuarantine(Ctx(t), "quarantined", leasestore.Note{By: "alice", Reason: "r"}); err != nil {
			t.Fatalf("ReleaseQuarantine: %v", err)
		}
		awaitRelease(t, sub, "a quarantine release")
	})

	t.Run("every release after subscribe", func(t *testing.T) {
		sub := subscribe(t, "repeat")
		for i := range 3 {
			Release(t, holder, Acquire(t, holder, Request("repeat", fmt.Sprintf("w%d", i), LongTTL)), leasestore.ResultFailed)
			awaitRelease(t, sub, fmt.Sprintf("release %d", i+1))
		}
	})
}

// late is the late outcome of l with result res.
func late(l *leasestore.Lease, res leasestore.Result) leasestore.LateOutcome {
	return leasestore.LateOutcome{Job: l.Job, Holder: l.Holder, Token: l.Token, Outcome: Outcome(res)}
}

// recordLate delivers a late outcome, failing the test on an error.
func recordLate(t *testing.T, s leasestore.Store, late leasestore.LateOutcome) leasestore.Correction {
	t.Helper()
	c, err := s.RecordLate(Ctx(t), late)
	if err != nil {
		t.Fatalf("RecordLate(%s by %s token %d): %v", late.Job, late.Holder, late.Token, err)
	}
	return c
}

// countCrash lets the job's crash be counted, as the next run's Acquire or a
// reaper would.
func countCrash(t *testing.T, s leasestore.Store, job string) {
	t.Helper()
	found, err := s.Scan(Ctx(t))
	if err != nil || !slices.ContainsFunc(found, func(c leasestore.Crash) bool { return c.Job == job }) {
		t.Fatalf("Scan = %+v, %v; want the crash of %s", found, err, job)
	}
}

func testRecordLateReleases(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// Its liveness expired (its release was cut off by a partition), but
	// nobody counted the crash yet.
	l := h.crashRun(t, s, "job", "a", 3)
	c := recordLate(t, s, late(l, leasestore.ResultFailed))
	if !c.Released || c.CrashWithdrawn || c.Crashes != 0 {
		t.Errorf("Correction %+v, want Released with 0 crashes", c)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateIdle || st.Crashes != 0 || st.LastOutcome == nil || st.LastOutcome.Result != leasestore.ResultFailed ||
		st.LastOutcome.Token != l.Token {
		t.Errorf("after RecordLate: state %s crashes %d last outcome %+v; want IDLE, 0, the late failure", st.State, st.Crashes, st.LastOutcome)
	}
	if found, err := s.Scan(Ctx(t)); err != nil || len(found) != 0 {
		t.Errorf("Scan after RecordLate = %+v, %v; want nothing to count", found, err)
	}
	if again := recordLate(t, s, late(l, leasestore.ResultFailed)); again.Released || again.CrashWithdrawn {
		t.Errorf("a second delivery = %+v, want nothing changed", again)
	}
	if after := Status(t, s, "job"); len(after.History) != len(st.History) {
		t.Errorf("a second delivery added events: %+v, then %+v", st.History, after.History)
	}
}

func testRecordLateWithdraws(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// Three partitions in a row, each run's crash counted before its
	// outcome arrives: none is a crash, and the job is not quarantined.
	for i := range 3 {
		l := h.crashRun(t, s, "job", fmt.Sprintf("w%d", i), 3)
		countCrash(t, s, "job")
		c := recordLate(t, s, late(l, leasestore.ResultFailed))
		if c.Released || !c.CrashWithdrawn || c.QuarantineLifted || c.Crashes != 0 {
			t.Fatalf("partition %d: Correction %+v, want the crash withdrawn, 0 crashes", i, c)
		}
		st := Status(t, s, "job")
		if st.State != leasestore.StateIdle || st.Crashes != 0 || st.LastOutcome == nil || st.LastOutcome.Token != l.Token ||
			st.LastOutcome.Result != leasestore.ResultFailed {
			t.Fatalf("partition %d: state %s crashes %d last outcome %+v; want IDLE, 0, the run's real outcome", i, st.State, st.Crashes, st.LastOutcome)
		}
		if e := lastEvent(t, st); e.Kind != leasestore.EventLateOutcome || e.Token != l.Token || e.Worker != l.Holder {
			t.Errorf("partition %d: last event %+v, want %s of token %d", i, e, leasestore.EventLateOutcome, l.Token)
		}
		// Delivered again (the first answer lost): nothing more.
		if again := recordLate(t, s, late(l, leasestore.ResultFailed)); again.CrashWithdrawn || again.Crashes != 0 {
			t.Fatalf("partition %d: a second delivery = %+v, want nothing changed", i, again)
		}
	}

	// A real crash between two others still counts once the other is
	// withdrawn.
	h.crashRun(t, s, "mixed", "real1", 5)
	countCrash(t, s, "mixed")
	lost := h.crashRun(t, s, "mixed", "partitioned", 5)
	countCrash(t, s, "mixed")
	h.crashRun(t, s, "mixed", "real2", 5)
	countCrash(t, s, "mixed")
	if c := recordLate(t, s, late(lost, leasestore.ResultFailed)); !c.CrashWithdrawn || c.Crashes != 2 {
		t.Errorf("withdrawing one of three crashes: %+v, want 2 crashes left", c)
	}

	// A run that released itself as crashed had its outcome recorded in
	// time: delivered again (the release's answer lost), it withdraws
	// nothing.
	selfCrashed := Acquire(t, s, Request("self-crashed", "c", LongTTL))
	Release(t, s, selfCrashed, leasestore.ResultCrashed)
	if c := recordLate(t, s, late(selfCrashed, leasestore.ResultCrashed)); c.CrashWithdrawn || c.Crashes != 1 {
		t.Errorf("a late outcome of a run that released itself as crashed: %+v, want nothing withdrawn, 1 crash", c)
	}

	// A crash already ended by a completed run is not withdrawn again.
	old := h.crashRun(t, s, "reset", "a", 5)
	countCrash(t, s, "reset")
	Release(t, s, Acquire(t, s, Request("reset", "b", LongTTL)), leasestore.ResultCompleted)
	if c := recordLate(t, s, late(old, leasestore.ResultFailed)); c.CrashWithdrawn || c.Crashes != 0 {
		t.Errorf("a late outcome of a crash a completed run already ended: %+v, want nothing withdrawn", c)
	}
	if st := Status(t, s, "reset"); st.LastOutcome == nil || st.LastOutcome.Result != leasestore.ResultCompleted {
		t.Errorf("last outcome %+v, want the later completed run's, not the late one", st.LastOutcome)
	}
}

func testRecordLateLiftsQuarantine(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	h.crashRun(t, s, "job", "real", 2)
	countCrash(t, s, "job")
	lost := h.crashRun(t, s, "job", "partitioned", 2)
	countCrash(t, s, "job")
	if st := Status(t, s, "job"); st.State != leasestore.StateQuarantined {
		t.Fatalf("state %s, want QUARANTINED after two counted crashes with max-crashes 2", st.State)
	}
	waiter := client(t, h.Fixture)
	sub, err := waiter.Subscribe(Ctx(t), "job")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Close()
	c := recordLate(t, s, late(lost, leasestore.ResultFailed))
	if !c.CrashWithdrawn || !c.QuarantineLifted || c.Crashes != 1 {
		t.Fatalf("Correction %+v, want the crash withdrawn and the quarantine lifted, 1 crash left", c)
	}
	select {
	case <-sub.Released():
	case <-time.After(HangGuard):
		t.Fatalf("no notification within %s after the quarantine was lifted", HangGuard)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateIdle || st.Quarantine != nil || st.Crashes != 1 {
		t.Errorf("state %s quarantine %+v crashes %d, want IDLE, none, 1", st.State, st.Quarantine, st.Crashes)
	}
	if !slices.ContainsFunc(st.History, func(e leasestore.Event) bool {
		return e.Kind == leasestore.EventUnquarantine && e.Worker == leasestore.ByLeasectl
	}) {
		t.Errorf("history %+v has no %s by %s", st.History, leasestore.EventUnquarantine, leasestore.ByLeasectl)
	}
	if list, err := s.Quarantined(Ctx(t)); err != nil || len(list) != 0 {
		t.Errorf("Quarantined() = %+v, %v; want none", list, err)
	}
	Acquire(t, s, Request("job", "next", LongTTL))

	// An operator's quarantine stays.
	h.crashRun(t, s, "manual", "real", 5)
	countCrash(t, s, "manual")
	lost = h.crashRun(t, s, "manual", "partitioned", 5)
	countCrash(t, s, "manual")
	if err := s.Quarantine(Ctx(t), "manual", leasestore.Note{By: "alice", Reason: "looking into it"}); err != nil {
		t.Fatalf("Quarantine: %v", err)
	}
	if c := recordLate(t, s, late(lost, leasestore.ResultFailed)); !c.CrashWithdrawn || c.QuarantineLifted {
		t.Errorf("Correction %+v, want the crash withdrawn and the operator's quarantine kept", c)
	}
	if st := Status(t, s, "manual"); st.State != leasestore.StateQuarantined || st.Quarantine.By != "alice" {
		t.Errorf("state %s quarantine %+v, want alice's quarantine kept", st.State, st.Quarantine)
	}
}

func testRecordLateCompleted(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	h.crashRun(t, s, "job", "c1", 10)
	countCrash(t, s, "job")
	lost := h.crashRun(t, s, "job", "completed-in-partition", 10)
	countCrash(t, s, "job")
	h.crashRun(t, s, "job", "c3", 10)
	countCrash(t, s, "job")
	before := Status(t, s, "job")
	out := late(lost, leasestore.ResultCompleted)
	c := recordLate(t, s, out)
	if !c.CrashWithdrawn || c.Crashes != 1 {
		t.Fatalf("Correction %+v, want the crash withdrawn and 1 crash left: only c3's came after a completed run", c)
	}
	st := Status(t, s, "job")
	if st.Crashes != 1 || st.LastOutcome == nil || st.LastOutcome.Token != lost.Token || st.LastOutcome.Result != leasestore.ResultCompleted {
		t.Errorf("crashes %d last outcome %+v, want 1 and the late completion", st.Crashes, st.LastOutcome)
	}
	if want := lost.GrantedAt.Add(out.Duration); !st.LastSuccess.Equal(want) || !before.LastSuccess.IsZero() {
		t.Errorf("last success %s (before %s), want the run's start + duration %s", st.LastSuccess, before.LastSuccess, want)
	}
}

func testRecordLateAbandoned(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	// The grant happened; its answer never reached its holder, who gave up.
	ghost := Acquire(t, s, Request("job", "ghost", LongTTL))
	gaveUp := leasestore.LateOutcome{Job: "job", Holder: "ghost", Outcome: Outcome(leasestore.ResultNotStarted)}
	if c := recordLate(t, s, gaveUp); !c.Released {
		t.Fatalf("Correction %+v, want the ghost grant released", c)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateIdle || st.Holder != nil || st.Crashes != 0 || st.LastOutcome == nil ||
		st.LastOutcome.Token != ghost.Token || st.LastOutcome.Result != leasestore.ResultNotStarted {
		t.Errorf("after the holder gave up: state %s holder %+v crashes %d last outcome %+v; want IDLE, no crash, not-started",
			st.State, st.Holder, st.Crashes, st.LastOutcome)
	}
	// Given up again (the first answer lost too): nothing more.
	if again := recordLate(t, s, gaveUp); again.Released || again.CrashWithdrawn {
		t.Errorf("giving up again = %+v, want nothing changed", again)
	}
	if after := Status(t, s, "job"); len(after.History) != len(st.History) {
		t.Errorf("giving up again added events: %+v, then %+v", st.History, after.History)
	}
	// Its request, arriving again late, grants nothing.
	if l, err := s.Acquire(Ctx(t), Request("job", "ghost", LongTTL)); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("Acquire by the holder that gave up = %+v, %v; want ErrLeaseLost", l, err)
	}
	Release(t, s, Acquire(t, s, Request("job", "next", LongTTL)), leasestore.ResultCompleted)

	// Given up before the grant arrived: the request arrives afterwards.
	if c := recordLate(t, s, leasestore.LateOutcome{Job: "early", Holder: "slow", Outcome: Outcome(leasestore.ResultNotStarted)}); c.Released || c.CrashWithdrawn {
		t.Errorf("giving up on a job never granted: %+v, want nothing released or withdrawn", c)
	}
	if _, err := s.Acquire(Ctx(t), Request("early", "slow", LongTTL)); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Errorf("Acquire arriving after its holder gave up = %v, want ErrLeaseLost", err)
	}
	Acquire(t, s, Request("early", "other", LongTTL))

	// Given up once the ghost's crash was counted: withdrawn.
	h.crashRun(t, s, "counted", "ghost", 3)
	countCrash(t, s, "counted")
	c := recordLate(t, s, leasestore.LateOutcome{Job: "counted", Holder: "ghost", Outcome: Outcome(leasestore.ResultNotStarted)})
	if !c.CrashWithdrawn || c.Crashes != 0 {
		t.Errorf("Correction %+v, want the ghost's crash withdrawn", c)
	}
}

func testRenewKeepsTheRoundTrip(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	l := Acquire(t, s, Request("job", "a", LongTTL))
	if st := Status(t, s, "job"); st.Holder == nil || st.Holder.LastRTT != 0 {
		t.Fatalf("a new lease's holder %+v, want no round trip yet", st.Holder)
	}
	l.RTT = 1234 * time.Microsecond
	if err := s.Renew(Ctx(t), l); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if st := Status(t, s, "job"); st.Holder == nil || st.Holder.LastRTT != l.RTT {
		t.Errorf("Status holder %+v, want last round trip %s", st.Holder, l.RTT)
	}
	list, err := s.Leases(Ctx(t))
	if err != nil || len(list) != 1 || list[0].LastRTT != l.RTT {
		t.Errorf("Leases() = %+v, %v; want the lease with last round trip %s", list, err, l.RTT)
	}
	Release(t, s, l, leasestore.ResultCompleted)
	Acquire(t, s, Request("job", "b", LongTTL))
	if st := Status(t, s, "job"); st.Holder == nil || st.Holder.LastRTT != 0 {
		t.Errorf("the next holder %+v, want no round trip of its own yet", st.Holder)
	}
}
