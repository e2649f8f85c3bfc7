package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Part of the conformance suite (Run): the read-only views and the release
// notifications: Status, Leases, Counts, CheckToken, Subscribe.

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
		sub, err := waiter.Subscribe(Ctx(t), job, "")
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
