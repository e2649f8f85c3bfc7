package storetest

import (
	"errors"
	"fmt"
	"slices"
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
	// Open returns a new client of the store's driver, as another process
	// would hold. The suite tests it through the portable leasestore.Store
	// and closes every client it opens.
	Open func(t testing.TB) leasestore.Driver
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
	// CoarseExpiry: the store knows how long a live lease has left only
	// coarsely (etcd: its etcd lease's TTL left, in whole seconds), so its
	// refusal of a job whose slots are all held may name any of the live
	// holders as the one whose lease expires first (HeldError); the
	// model-based test then accepts any of them.
	CoarseExpiry bool
	// WakesInTurn: a subscription made for a waiter (Subscribe's waiter)
	// is woken only when its turn may have come, not by every release of
	// the job (docs/semantics.md, Slots and the queue).
	WakesInTurn bool
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
		{"DriverWrappedOnce", testDriverWrappedOnce},
		{"RenewKeepsTheRoundTrip", testRenewKeepsTheRoundTrip},
		{"RecordLateReleasesARunStillThere", testRecordLateReleases},
		{"RecordLateWithdrawsACountedCrash", testRecordLateWithdraws},
		{"RecordLateLiftsTheQuarantineItCaused", testRecordLateLiftsQuarantine},
		{"RecordLateCompletedEndsTheStreak", testRecordLateCompleted},
		{"RecordLateAbandonedGrant", testRecordLateAbandoned},
		{"Stop", testStop},
		{"Expect", testExpect},
		{"NoticePut", testNoticePut},
		{"NoticeClaim", testNoticeClaim},
		{"NoticeSettle", testNoticeSettle},
		{"Jobs", testJobs},
		{"Slots", testSlots},
		{"SlotsMustAgree", testSlotsMustAgree},
		{"QueueOrder", testQueueOrder},
		{"WaiterVanishesMidQueue", testWaiterVanishes},
		{"WaiterLeaves", testWaiterLeaves},
		{"WakeInTurn", testWakeInTurn},
		{"RefusedHeadWakesNext", testRefusedHeadWakesNext},
		{"CrashesWakeInTurn", testCrashesWakeInTurn},
		{"CountedCrashesWakeInTurn", testCountedCrashesWakeInTurn},
		{"GiveUpWakesNext", testGiveUpWakesNext},
		{"CrashCountedWhileOthersWait", testCrashWhileOthersWait},
		{"ScanCountsEachSlot", testScanCountsEachSlot},
		{"StopEverySlot", testStopEverySlot},
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
func (h fixture) crashRun(t *testing.T, s Client, job, worker string, maxCrashes int) *leasestore.Lease {
	t.Helper()
	req := Request(job, worker, h.shortTTL())
	req.MaxCrashes = maxCrashes
	l := Acquire(t, s, req)
	h.awaitExpired(t, s, l)
	return l
}

// awaitExpired waits until the store no longer reports l as the job's live
// lease, which takes at least l.TTL from its grant.
func (h fixture) awaitExpired(t *testing.T, s Client, l *leasestore.Lease) {
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

// client opens a client of f, as callers hold it (the portable Store over
// f's driver), that is closed when the test ends.
func client(t testing.TB, f Fixture) *leasestore.Store {
	t.Helper()
	s := leasestore.New(f.Open(t))
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
	clients := make([]*leasestore.Store, n)
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
	clients := make([]*leasestore.Store, racers)
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
