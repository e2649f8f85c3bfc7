package leasestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// storeHarness gives the conformance suite access to one fresh store.
type storeHarness struct {
	// open returns a new client to the same store, like another process
	// would hold. The suite closes every client it opens.
	open func(t *testing.T) Store
	// wipe loses all the store's data (Redis FLUSHALL; embedded: delete the
	// file), as a restart without persistence would.
	wipe func(t *testing.T)
}

// Timing of the suite. Leases the test relies on stay live for a minute;
// leases it lets expire are short, and it waits well past their expiry, so a
// noisy machine does not turn the margins into flakes.
const (
	longTTL     = time.Minute
	shortTTL    = 200 * time.Millisecond
	expiryWait  = shortTTL + 300*time.Millisecond
	evidenceTTL = time.Hour
	hangGuard   = 5 * time.Second
)

// testConformance runs the store contract (see semantics in store.go and
// errors.go) against the store newHarness makes. newHarness is called once
// per subtest, so every subtest starts from an empty store.
func testConformance(t *testing.T, newHarness func(t *testing.T) storeHarness) {
	tests := []struct {
		name string
		run  func(t *testing.T, h storeHarness)
	}{
		{"MutualExclusion", testMutualExclusion},
		{"Renew", testRenew},
		{"RenewExtendsEvidence", testRenewExtendsEvidence},
		{"ReleaseWithStaleTokenChangesNothing", testReleaseStale},
		{"ReleaseOutcomes", testReleaseOutcomes},
		{"TokensStrictlyIncrease", testTokensIncrease},
		{"CrashCountedOnce", testCrashCountedOnce},
		{"QuarantineAtRunThreshold", testQuarantineThreshold},
		{"ManualQuarantine", testManualQuarantine},
		{"MinInterval", testMinInterval},
		{"HistoryBounded", testHistoryBounded},
		{"StatusLeasesCounts", testStatusLeasesCounts},
		{"CheckToken", testCheckToken},
		{"Subscribe", testSubscribe},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newHarness(t)) })
	}
}

// client opens a client of h that is closed when the test ends.
func client(t *testing.T, h storeHarness) Store {
	t.Helper()
	s := h.open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ctx bounds one store call; the contract has every call return by then.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), hangGuard)
	t.Cleanup(cancel)
	return c
}

// request is an acquire request of worker for job with the given TTL.
func request(job, worker string, ttl time.Duration) AcquireRequest {
	return AcquireRequest{
		Job: job, Holder: worker, Host: "host-" + worker, PID: len(worker) + 1000,
		Command: []string{"/bin/run", worker}, TTL: ttl, EvidenceTTL: evidenceTTL, MaxCrashes: 3,
	}
}

func acquire(t *testing.T, s Store, req AcquireRequest) *Lease {
	t.Helper()
	l, err := s.Acquire(ctx(t), req)
	if err != nil {
		t.Fatalf("Acquire(%s by %s): %v", req.Job, req.Holder, err)
	}
	return l
}

func release(t *testing.T, s Store, l *Lease, res Result) {
	t.Helper()
	if err := s.Release(ctx(t), l, outcome(res)); err != nil {
		t.Fatalf("Release(%s token %d, %s): %v", l.Job, l.Token, res, err)
	}
}

func outcome(res Result) Outcome {
	switch res {
	case ResultCompleted:
		return Outcome{Result: res, ExitCode: 0, Duration: time.Second}
	case ResultCrashed:
		return Outcome{Result: res, ExitCode: -1, Signal: 11, Duration: time.Second}
	case ResultNotStarted:
		return Outcome{Result: res, ExitCode: 127}
	default:
		return Outcome{Result: res, ExitCode: 3, Duration: time.Second}
	}
}

func status(t *testing.T, s Store, job string) *JobStatus {
	t.Helper()
	st, err := s.Status(ctx(t), job)
	if err != nil {
		t.Fatalf("Status(%s): %v", job, err)
	}
	return st
}

// crashRun acquires job with a short TTL and lets the lease expire without
// releasing it, as a SIGKILLed supervisor would.
func crashRun(t *testing.T, s Store, job, worker string, maxCrashes int) *Lease {
	t.Helper()
	req := request(job, worker, shortTTL)
	req.MaxCrashes = maxCrashes
	l := acquire(t, s, req)
	time.Sleep(expiryWait)
	return l
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

func lastEvent(t *testing.T, st *JobStatus) Event {
	t.Helper()
	if len(st.History) == 0 {
		t.Fatalf("job %s has no history", st.Job)
	}
	return st.History[len(st.History)-1]
}

// hasEvent reports whether history holds an event of kind for token.
func hasEvent(history []Event, kind EventKind, token int64) bool {
	return slices.ContainsFunc(history, func(e Event) bool { return e.Kind == kind && e.Token == token })
}

func testMutualExclusion(t *testing.T, h storeHarness) {
	const n = 50
	clients := make([]Store, n)
	for i := range clients {
		clients[i] = client(t, h)
	}
	leases := make([]*Lease, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			leases[i], errs[i] = clients[i].Acquire(ctx(t), request("job", fmt.Sprintf("w%d", i), longTTL))
		})
	}
	close(start)
	wg.Wait()

	var winner *Lease
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
	want := request("job", winner.Holder, longTTL)
	for i, err := range errs {
		if leases[i] != nil {
			continue
		}
		held := errorAs[*HeldError](t, err)
		if held.Job != "job" || held.Holder != winner.Holder || held.Host != want.Host || held.PID != want.PID ||
			held.Token != winner.Token || !held.Since.Equal(winner.GrantedAt) {
			t.Errorf("worker %d: HeldError %+v does not describe the winner %+v", i, held, winner)
		}
		if held.ExpiresIn <= 0 || held.ExpiresIn > longTTL {
			t.Errorf("worker %d: HeldError.ExpiresIn = %s, want in (0, %s]", i, held.ExpiresIn, longTTL)
		}
	}
}

func testRenew(t *testing.T, h storeHarness) {
	s := client(t, h)

	t.Run("live lease is extended", func(t *testing.T) {
		l := acquire(t, s, request("live", "a", longTTL))
		before := status(t, s, "live").Holder.ExpiresAt
		time.Sleep(10 * time.Millisecond)
		if err := s.Renew(ctx(t), l); err != nil {
			t.Fatalf("Renew of a live lease: %v", err)
		}
		if after := status(t, s, "live").Holder.ExpiresAt; !after.After(before) {
			t.Errorf("expiry after renew %s, want later than %s", after, before)
		}
	})

	t.Run("refused after expiry", func(t *testing.T) {
		l := crashRun(t, s, "expired", "a", 3)
		if err := s.Renew(ctx(t), l); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Renew after expiry = %v, want ErrLeaseLost", err)
		}
		st := status(t, s, "expired")
		if !hasEvent(st.History, EventLeaseLost, l.Token) {
			t.Errorf("history %+v has no lease-lost event for token %d", st.History, l.Token)
		}
		if st.State != StateCrashed {
			t.Errorf("state after a refused renew = %s, want %s (the run is still unaccounted)", st.State, StateCrashed)
		}
	})

	t.Run("refused after another holder took over", func(t *testing.T) {
		old := crashRun(t, s, "taken", "a", 3)
		other := client(t, h)
		cur := acquire(t, other, request("taken", "b", longTTL))
		if err := s.Renew(ctx(t), old); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Renew of the replaced lease = %v, want ErrLeaseLost", err)
		}
		if err := other.CheckToken(ctx(t), "taken", cur.Token); err != nil {
			t.Errorf("the new holder's token after the old one's renew: %v", err)
		}
	})

	t.Run("refused for another holder with the same job", func(t *testing.T) {
		l := acquire(t, s, request("impostor", "a", longTTL))
		forged := *l
		forged.Holder = "b"
		if err := s.Renew(ctx(t), &forged); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Renew by a holder that does not hold the lease = %v, want ErrLeaseLost", err)
		}
	})
}

func testRenewExtendsEvidence(t *testing.T, h storeHarness) {
	s := client(t, h)
	// Renewals come every ttl/4 and the check comes ttl+500ms after the last
	// one, 400ms before the renewed evidence would expire: margins for a
	// busy machine.
	const (
		ttl      = 600 * time.Millisecond
		evidence = 1500 * time.Millisecond
	)
	req := request("job", "a", ttl)
	req.EvidenceTTL = evidence
	l := acquire(t, s, req)
	// Renew until well past the evidence's original expiry.
	last := time.Now()
	for end := time.Now().Add(evidence + 500*time.Millisecond); time.Now().Before(end); {
		time.Sleep(ttl / 4)
		if err := s.Renew(ctx(t), l); err != nil {
			t.Fatalf("Renew %s after the previous one: %v", time.Since(last), err)
		}
		last = time.Now()
	}
	// Let the liveness lapse; the evidence, renewed with it, must remain.
	time.Sleep(ttl + 500*time.Millisecond)
	st := status(t, s, "job")
	if st.State != StateCrashed || st.Crashed == nil || st.Crashed.Token != l.Token {
		t.Fatalf("state %s, crashed %+v: want %s with the run's evidence (token %d) outliving its original TTL",
			st.State, st.Crashed, StateCrashed, l.Token)
	}
}

func testReleaseStale(t *testing.T, h storeHarness) {
	s := client(t, h)
	old := crashRun(t, s, "job", "a", 3)
	cur := acquire(t, s, request("job", "b", longTTL))
	before := status(t, s, "job")

	if err := s.Release(ctx(t), old, outcome(ResultCompleted)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release with the previous token = %v, want ErrLeaseLost", err)
	}
	forged := *cur
	forged.Token = cur.Token + 1
	if err := s.Release(ctx(t), &forged, outcome(ResultCrashed)); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release with a token never granted = %v, want ErrLeaseLost", err)
	}

	after := status(t, s, "job")
	if after.State != StateRunning || after.Holder == nil || after.Holder.Token != cur.Token {
		t.Fatalf("after stale releases: state %s holder %+v, want %s by token %d", after.State, after.Holder, StateRunning, cur.Token)
	}
	if after.LastToken != before.LastToken || after.Crashes != before.Crashes || after.Attempts != before.Attempts ||
		after.LastOutcome != nil || !after.LastSuccess.IsZero() || len(after.History) != len(before.History) {
		t.Errorf("stale releases changed the record:\nbefore %+v\nafter  %+v", before, after)
	}
	if err := s.CheckToken(ctx(t), "job", cur.Token); err != nil {
		t.Errorf("the current holder's token after stale releases: %v", err)
	}
	if err := s.Release(ctx(t), &Lease{Job: "never-seen", Holder: "x", Token: 1}, outcome(ResultCompleted)); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Release on a job never granted = %v, want ErrLeaseLost", err)
	}
}

func testReleaseOutcomes(t *testing.T, h storeHarness) {
	tests := []struct {
		result      Result
		wantCrashes int // starting from one counted crash
		wantSuccess bool
		wantKind    EventKind
	}{
		{ResultCompleted, 0, true, EventReleased},
		{ResultFailed, 1, false, EventReleased},
		{ResultCrashed, 2, false, EventCrashed},
		{ResultNotStarted, 1, false, EventReleased},
	}
	s := client(t, h)
	// Every job starts with one counted crash.
	for _, tc := range tests {
		req := request("job-"+string(tc.result), "crasher", shortTTL)
		req.MaxCrashes = 5
		acquire(t, s, req)
	}
	time.Sleep(expiryWait)
	if found, err := s.Scan(ctx(t)); err != nil || len(found) != len(tests) {
		t.Fatalf("Scan = %+v, %v; want %d crashes", found, err, len(tests))
	}
	for _, tc := range tests {
		t.Run(string(tc.result), func(t *testing.T) {
			job := "job-" + string(tc.result)
			l := acquire(t, s, request(job, "a", longTTL))
			out := outcome(tc.result)
			if err := s.Release(ctx(t), l, out); err != nil {
				t.Fatalf("Release: %v", err)
			}

			st := status(t, s, job)
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
			if st.State != StateIdle || st.Holder != nil {
				t.Errorf("state after release %s (holder %+v), want %s", st.State, st.Holder, StateIdle)
			}
			// The job is free at once, and nothing is left to count.
			next := acquire(t, s, request(job, "b", longTTL))
			if next.Recovered != nil {
				t.Errorf("Acquire after a %s release recovered a crash: %+v", tc.result, next.Recovered)
			}
			if st := status(t, s, job); st.Crashes != tc.wantCrashes {
				t.Errorf("crashes after the next acquire = %d, want %d", st.Crashes, tc.wantCrashes)
			}
		})
	}

	t.Run("crashed at the threshold quarantines", func(t *testing.T) {
		req := request("poison", "a", longTTL)
		req.MaxCrashes = 2
		release(t, s, acquire(t, s, req), ResultCrashed)
		l := acquire(t, s, req)
		release(t, s, l, ResultCrashed)
		st := status(t, s, "poison")
		if st.State != StateQuarantined || st.Crashes != 2 || st.Quarantine == nil || st.Quarantine.LastHolder != "a" {
			t.Fatalf("after 2 crashed releases with max 2: state %s crashes %d quarantine %+v", st.State, st.Crashes, st.Quarantine)
		}
	})
}

func testTokensIncrease(t *testing.T, h storeHarness) {
	s := client(t, h)
	var last int64
	grant := func(worker string) *Lease {
		t.Helper()
		l := acquire(t, s, request("job", worker, longTTL))
		if l.Token <= last {
			t.Fatalf("grant to %s: token %d, not above the previous %d", worker, l.Token, last)
		}
		last = l.Token
		return l
	}
	for i := range 5 {
		release(t, s, grant(fmt.Sprintf("w%d", i)), ResultCompleted)
	}

	h.wipe(t)
	release(t, s, grant("after-wipe"), ResultCompleted)

	grant("held")
	h.wipe(t)
	l := grant("after-wipe-while-held")
	if st := status(t, s, "job"); st.LastToken != l.Token {
		t.Errorf("LastToken %d, want %d", st.LastToken, l.Token)
	}
}

func testCrashCountedOnce(t *testing.T, h storeHarness) {
	const racers = 20
	crashed := crashRun(t, client(t, h), "job", "crasher", 10)
	clients := make([]Store, racers)
	for i := range clients {
		clients[i] = client(t, h)
	}
	var (
		mu      sync.Mutex
		counted []Crash
		grants  int
	)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			if i%2 == 0 {
				found, err := clients[i].Scan(ctx(t))
				if err != nil {
					t.Errorf("Scan: %v", err)
				}
				mu.Lock()
				counted = append(counted, found...)
				mu.Unlock()
				return
			}
			l, err := clients[i].Acquire(ctx(t), request("job", fmt.Sprintf("w%d", i), longTTL))
			var held *HeldError
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
	st := status(t, clients[0], "job")
	if st.Crashes != 1 {
		t.Errorf("crash count %d, want 1", st.Crashes)
	}
	if n := len(slices.DeleteFunc(slices.Clone(st.History), func(e Event) bool { return e.Kind != EventCrashed })); n != 1 {
		t.Errorf("%d crashed events in history, want 1", n)
	}
}

func testQuarantineThreshold(t *testing.T, h storeHarness) {
	s := client(t, h)
	// The detector's own threshold (100) must not matter: the crashed run
	// was started with 2.
	detector := request("job", "detector", longTTL)
	detector.MaxCrashes = 100

	crashRun(t, s, "job", "c1", 2)
	found, err := s.Scan(ctx(t))
	if err != nil || len(found) != 1 || found[0].Crashes != 1 || found[0].Quarantined {
		t.Fatalf("first crash: Scan = %+v, %v; want one crash, not quarantined", found, err)
	}
	last := crashRun(t, s, "job", "c2", 2)
	_, err = s.Acquire(ctx(t), detector)
	q := errorAs[*QuarantinedError](t, err)
	if q.Job != "job" || q.Crashes != 2 || q.By != "leasectl" || q.LastHolder != "c2" || q.LastHost != "host-c2" ||
		q.Since.IsZero() || !strings.Contains(q.Reason, "2") {
		t.Errorf("QuarantinedError %+v, want job quarantined by leasectl after 2 crashes of c2", q.Quarantine)
	}
	st := status(t, s, "job")
	if st.State != StateQuarantined || st.Crashes != 2 || st.Holder != nil {
		t.Errorf("status %s crashes %d holder %+v, want %s with 2 crashes and no holder", st.State, st.Crashes, st.Holder, StateQuarantined)
	}
	if !hasEvent(st.History, EventCrashed, last.Token) || !hasEvent(st.History, EventQuarantined, last.Token) {
		t.Errorf("history %+v lacks the crash and the quarantine of token %d", st.History, last.Token)
	}
	list, err := s.Quarantined(ctx(t))
	if err != nil || len(list) != 1 || list[0].Job != "job" || list[0].Crashes != 2 {
		t.Errorf("Quarantined() = %+v, %v; want the job with 2 crashes", list, err)
	}
	if c, err := s.Counts(ctx(t)); err != nil || c.Quarantined != 1 || c.InFlight != 0 {
		t.Errorf("Counts() = %+v, %v; want 1 quarantined, 0 in flight", c, err)
	}
	_, err = s.Acquire(ctx(t), detector)
	errorAs[*QuarantinedError](t, err)

	note := Note{By: "oncall", Reason: "fixed the input"}
	if err := s.ReleaseQuarantine(ctx(t), "job", note); err != nil {
		t.Fatalf("ReleaseQuarantine: %v", err)
	}
	st = status(t, s, "job")
	if st.State != StateIdle || st.Crashes != 0 || st.Quarantine != nil {
		t.Errorf("after release: state %s crashes %d quarantine %+v, want %s, 0, none", st.State, st.Crashes, st.Quarantine, StateIdle)
	}
	if e := lastEvent(t, st); e.Kind != EventUnquarantine || !strings.Contains(e.Detail, note.By) || !strings.Contains(e.Detail, note.Reason) {
		t.Errorf("last event %+v, want %s naming %q and %q", e, EventUnquarantine, note.By, note.Reason)
	}
	if err := s.ReleaseQuarantine(ctx(t), "job", note); !errors.Is(err, ErrNotQuarantined) {
		t.Errorf("second ReleaseQuarantine = %v, want ErrNotQuarantined", err)
	}
	if list, err := s.Quarantined(ctx(t)); err != nil || len(list) != 0 {
		t.Errorf("Quarantined() after release = %+v, %v; want none", list, err)
	}
	acquire(t, s, detector)
}

func testManualQuarantine(t *testing.T, h storeHarness) {
	s := client(t, h)
	first := Note{By: "alice", Reason: "bad deploy"}
	if err := s.Quarantine(ctx(t), "never-seen", first); err != nil {
		t.Fatalf("Quarantine of a job the store never saw: %v", err)
	}
	_, err := s.Acquire(ctx(t), request("never-seen", "a", longTTL))
	q := errorAs[*QuarantinedError](t, err)
	if q.By != first.By || q.Reason != first.Reason || q.Since.IsZero() {
		t.Errorf("QuarantinedError %+v, want by %q reason %q", q.Quarantine, first.By, first.Reason)
	}

	time.Sleep(10 * time.Millisecond)
	second := Note{By: "bob", Reason: "still bad"}
	if err := s.Quarantine(ctx(t), "never-seen", second); err != nil {
		t.Fatalf("second Quarantine: %v", err)
	}
	st := status(t, s, "never-seen")
	if st.State != StateQuarantined || st.Quarantine == nil || !st.Quarantine.Since.Equal(q.Since) || st.Quarantine.Reason != second.Reason {
		t.Errorf("after a second Quarantine: %+v, want since %s kept and reason %q", st.Quarantine, q.Since, second.Reason)
	}
	if e := lastEvent(t, st); e.Kind != EventQuarantined || !strings.Contains(e.Detail, second.By) || !strings.Contains(e.Detail, second.Reason) {
		t.Errorf("last event %+v, want %s naming %q and %q", e, EventQuarantined, second.By, second.Reason)
	}
	if err := s.ReleaseQuarantine(ctx(t), "other", first); !errors.Is(err, ErrNotQuarantined) {
		t.Errorf("ReleaseQuarantine of a job never quarantined = %v, want ErrNotQuarantined", err)
	}
}

func testMinInterval(t *testing.T, h storeHarness) {
	s := client(t, h)
	release(t, s, acquire(t, s, request("job", "a", longTTL)), ResultCompleted)
	before := status(t, s, "job")

	req := request("job", "b", longTTL)
	req.MinInterval = time.Hour
	_, err := s.Acquire(ctx(t), req)
	soon := errorAs[*TooSoonError](t, err)
	if soon.Job != "job" || soon.MinInterval != time.Hour || !soon.LastSuccess.Equal(before.LastSuccess) ||
		soon.Age < 0 || soon.Age > time.Minute {
		t.Errorf("TooSoonError %+v, want last success %s, age under a minute", soon, before.LastSuccess)
	}
	if after := status(t, s, "job"); after.Attempts != before.Attempts || after.LastToken != before.LastToken ||
		len(after.History) != len(before.History) {
		t.Errorf("a too-soon refusal wrote: before %+v, after %+v", before, after)
	}

	time.Sleep(50 * time.Millisecond)
	req.MinInterval = 10 * time.Millisecond
	l := acquire(t, s, req)
	release(t, s, l, ResultFailed)
	req.MinInterval = time.Hour
	_, err = s.Acquire(ctx(t), req)
	errorAs[*TooSoonError](t, err)

	req.Job = "never-completed"
	acquire(t, s, req)
}

func testHistoryBounded(t *testing.T, h storeHarness) {
	s := client(t, h)
	var last *Lease
	for i := range HistoryLimit {
		last = acquire(t, s, request("job", fmt.Sprintf("w%d", i), longTTL))
		release(t, s, last, ResultCompleted)
	}
	st := status(t, s, "job")
	if len(st.History) != HistoryLimit {
		t.Fatalf("history has %d events, want %d", len(st.History), HistoryLimit)
	}
	for i := 1; i < len(st.History); i++ {
		if st.History[i].At.Before(st.History[i-1].At) {
			t.Errorf("history not oldest first at %d: %s before %s", i, st.History[i].At, st.History[i-1].At)
		}
	}
	if e := lastEvent(t, st); e.Kind != EventReleased || e.Token != last.Token || e.Worker != last.Holder {
		t.Errorf("newest event %+v, want the release of token %d", e, last.Token)
	}
	if first := st.History[0]; first.Worker != fmt.Sprintf("w%d", HistoryLimit/2) || first.Kind != EventAcquired {
		t.Errorf("oldest kept event %+v, want the acquire of w%d", first, HistoryLimit/2)
	}
}

func testStatusLeasesCounts(t *testing.T, h storeHarness) {
	s := client(t, h)
	st := status(t, s, "never-seen")
	if st.State != StateIdle || st.Holder != nil || st.Crashed != nil || st.Quarantine != nil || st.LastOutcome != nil ||
		st.LastToken != 0 || st.Attempts != 0 || st.Crashes != 0 || len(st.History) != 0 || st.Now.IsZero() {
		t.Errorf("a job never seen: %+v, want IDLE with zero values and the store's clock", st)
	}

	leases := map[string]*Lease{}
	for _, job := range []string{"b", "a", "c"} {
		leases[job] = acquire(t, s, request(job, "w-"+job, longTTL))
	}
	crashed := crashRun(t, s, "d", "w-d", 3)
	if err := s.Quarantine(ctx(t), "e", Note{By: "alice", Reason: "off"}); err != nil {
		t.Fatalf("Quarantine: %v", err)
	}

	st = status(t, s, "a")
	want := request("a", "w-a", longTTL)
	if st.State != StateRunning || st.Holder == nil {
		t.Fatalf("state %s holder %+v, want %s with a holder", st.State, st.Holder, StateRunning)
	}
	hd := st.Holder
	if hd.Worker != want.Holder || hd.Host != want.Host || hd.PID != want.PID || hd.Token != leases["a"].Token ||
		hd.Attempt != 1 || !slices.Equal(hd.Command, want.Command) || !hd.StartedAt.Equal(leases["a"].GrantedAt) {
		t.Errorf("holder %+v does not describe the lease %+v", hd, leases["a"])
	}
	if left := hd.ExpiresAt.Sub(st.Now); left <= 0 || left > longTTL {
		t.Errorf("TTL left %s, want in (0, %s]", left, longTTL)
	}
	if st.LastToken != leases["a"].Token || st.Attempts != 1 || st.MaxCrashes != want.MaxCrashes {
		t.Errorf("record: last token %d attempts %d max crashes %d", st.LastToken, st.Attempts, st.MaxCrashes)
	}

	st = status(t, s, "d")
	if st.State != StateCrashed || st.Holder != nil || st.Crashed == nil || st.Crashed.Holder != "w-d" ||
		st.Crashed.Token != crashed.Token || st.Crashes != 0 {
		t.Errorf("crashed job: state %s holder %+v crashed %+v crashes %d, want %s with uncounted evidence of token %d",
			st.State, st.Holder, st.Crashed, st.Crashes, StateCrashed, crashed.Token)
	}
	if st := status(t, s, "e"); st.State != StateQuarantined {
		t.Errorf("quarantined job: state %s", st.State)
	}

	list, err := s.Leases(ctx(t))
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
	if c, err := s.Counts(ctx(t)); err != nil || c != (Counts{InFlight: 3, Quarantined: 1}) {
		t.Errorf("Counts() = %+v, %v; want 3 in flight, 1 quarantined", c, err)
	}

	release(t, s, leases["b"], ResultCompleted)
	if st := status(t, s, "b"); st.State != StateIdle || st.LastOutcome == nil || st.LastSuccess.IsZero() {
		t.Errorf("released job: state %s last outcome %+v last success %s", st.State, st.LastOutcome, st.LastSuccess)
	}
	if c, err := s.Counts(ctx(t)); err != nil || c.InFlight != 2 {
		t.Errorf("Counts() after a release = %+v, %v; want 2 in flight", c, err)
	}
}

func testCheckToken(t *testing.T, h storeHarness) {
	s := client(t, h)
	stale := func(err error, token, current int64, live bool) {
		t.Helper()
		e := errorAs[*StaleTokenError](t, err)
		if e.Job != "job" || e.Token != token || e.Current != current || e.Live != live {
			t.Errorf("StaleTokenError %+v, want token %d current %d live %v", e, token, current, live)
		}
	}
	stale(s.CheckToken(ctx(t), "job", 1), 1, 0, false)

	prev := crashRun(t, s, "job", "a", 3)
	stale(s.CheckToken(ctx(t), "job", prev.Token), prev.Token, prev.Token, false)

	cur := acquire(t, s, request("job", "b", longTTL))
	if err := s.CheckToken(ctx(t), "job", cur.Token); err != nil {
		t.Errorf("CheckToken of the current live token: %v", err)
	}
	stale(s.CheckToken(ctx(t), "job", prev.Token), prev.Token, cur.Token, true)
	stale(s.CheckToken(ctx(t), "job", cur.Token+1), cur.Token+1, cur.Token, true)

	release(t, s, cur, ResultCompleted)
	stale(s.CheckToken(ctx(t), "job", cur.Token), cur.Token, cur.Token, false)
}

func testSubscribe(t *testing.T, h storeHarness) {
	waiter := client(t, h)
	holder := client(t, h)
	awaitRelease := func(t *testing.T, sub Subscription, what string) {
		t.Helper()
		select {
		case <-sub.Released():
		case <-time.After(hangGuard):
			t.Fatalf("no release notification within %s after %s", hangGuard, what)
		}
	}
	subscribe := func(t *testing.T, job string) Subscription {
		t.Helper()
		sub, err := waiter.Subscribe(ctx(t), job)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		return sub
	}

	t.Run("release", func(t *testing.T) {
		l := acquire(t, holder, request("job", "a", longTTL))
		sub := subscribe(t, "job")
		release(t, holder, l, ResultCompleted)
		awaitRelease(t, sub, "a release")
		acquire(t, waiter, request("job", "b", longTTL))
	})

	t.Run("crash counted", func(t *testing.T) {
		crashRun(t, holder, "crashed", "a", 3)
		sub := subscribe(t, "crashed")
		if _, err := holder.Scan(ctx(t)); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		awaitRelease(t, sub, "a crash was counted")
	})

	t.Run("quarantine released", func(t *testing.T) {
		if err := holder.Quarantine(ctx(t), "quarantined", Note{By: "alice", Reason: "r"}); err != nil {
			t.Fatalf("Quarantine: %v", err)
		}
		sub := subscribe(t, "quarantined")
		if err := holder.ReleaseQuarantine(ctx(t), "quarantined", Note{By: "alice", Reason: "r"}); err != nil {
			t.Fatalf("ReleaseQuarantine: %v", err)
		}
		awaitRelease(t, sub, "a quarantine release")
	})

	t.Run("every release after subscribe", func(t *testing.T) {
		sub := subscribe(t, "repeat")
		for i := range 3 {
			release(t, holder, acquire(t, holder, request("repeat", fmt.Sprintf("w%d", i), longTTL)), ResultFailed)
			awaitRelease(t, sub, fmt.Sprintf("release %d", i+1))
		}
	})
}
