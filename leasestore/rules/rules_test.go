package rules

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The table tests of this file are the rules in the words of their cases:
// each says what a job's record holds, what happens at what time, and what
// the rules answer and leave.

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

const ttl = 30 * time.Second

func at(d time.Duration) time.Time { return t0.Add(d) }

func request(holder string) leasestore.AcquireRequest {
	return leasestore.AcquireRequest{Job: "job", Holder: holder, Host: "host", PID: 7, TTL: ttl,
		EvidenceTTL: 3 * ttl, MaxCrashes: 3}
}

// running is a record whose run by holder was granted at t0 with token.
func running(holder string, token int64) *Record {
	r := &Record{Job: "job"}
	if _, _, err := Acquire(r, request(holder), t0); err != nil {
		panic(err)
	}
	r.LastToken, r.Runs[0].Token = token, token
	return r
}

// crashed is running whose liveness expired unseen, with crashes counted
// before.
func crashed(holder string, token int64, crashes int) *Record {
	r := running(holder, token)
	r.Crashes = crashes
	return r
}

// only is the record's one run, nil when it has none.
func only(r *Record) *Run {
	switch len(r.Runs) {
	case 0:
		return nil
	case 1:
		return r.Runs[0]
	}
	panic(fmt.Sprintf("%d runs where one was expected", len(r.Runs)))
}

func lease(r *Record) *leasestore.Lease {
	return &leasestore.Lease{Job: "job", Holder: only(r).Holder, Token: only(r).Token, TTL: ttl}
}

func kinds(s Step) []leasestore.EventKind {
	var k []leasestore.EventKind
	for _, e := range s.Events {
		k = append(k, e.Kind)
	}
	return k
}

func TestAcquire(t *testing.T) {
	type want struct {
		refusal any // a pointer to the refusal's type, or ErrLeaseLost; nil: granted
		token   int64
		attempt int64
		crashes int
		events  []leasestore.EventKind
	}
	quarantined := func() *Record {
		r := &Record{Job: "job"}
		Quarantine(r, leasestore.Note{By: "oncall", Reason: "bad input"}, t0)
		return r
	}
	tests := []struct {
		name   string
		record func() *Record
		req    leasestore.AcquireRequest
		now    time.Time
		want   want
	}{
		{"a job never seen is granted, its token the clock in µs",
			func() *Record { return &Record{Job: "job"} }, request("w1"), t0,
			want{token: t0.UnixMicro(), attempt: 1, events: []leasestore.EventKind{leasestore.EventAcquired}}},
		{"the token rises above the last even when the clock is behind it",
			func() *Record { return &Record{Job: "job", LastToken: t0.UnixMicro() + 100, Attempts: 4} }, request("w1"), t0,
			want{token: t0.UnixMicro() + 101, attempt: 5, events: []leasestore.EventKind{leasestore.EventAcquired}}},
		{"a live lease of another refuses it",
			func() *Record { return running("w1", 10) }, request("w2"), at(time.Second),
			want{refusal: new(*leasestore.HeldError)}},
		{"the live holder asking again gets its lease back, renewed, with no event",
			func() *Record { return running("w1", 10) }, request("w1"), at(time.Second),
			want{token: 10, attempt: 1}},
		{"a holder that gave up on its grant is refused",
			func() *Record { r := &Record{Job: "job"}; r.Abandoned = "w1"; return r }, request("w1"), t0,
			want{refusal: leasestore.ErrLeaseLost}},
		{"quarantine refuses before anything else is looked at",
			quarantined, request("w1"), t0,
			want{refusal: new(*leasestore.QuarantinedError)}},
		{"another region is refused",
			func() *Record { return &Record{Job: "job", Region: "eu"} },
			func() leasestore.AcquireRequest { q := request("w1"); q.Region = "us"; return q }(), t0,
			want{refusal: new(*leasestore.RegionError)}},
		{"a crashed run is counted, and the job granted",
			func() *Record { return crashed("w1", 10, 0) }, request("w2"), at(ttl + time.Second),
			want{token: at(ttl + time.Second).UnixMicro(), attempt: 2, crashes: 1,
				events: []leasestore.EventKind{leasestore.EventCrashed, leasestore.EventAcquired}}},
		{"a crash that reaches the run's threshold quarantines and refuses",
			func() *Record { return crashed("w1", 10, 2) }, request("w2"), at(ttl + time.Second),
			want{refusal: new(*leasestore.QuarantinedError), crashes: 3,
				events: []leasestore.EventKind{leasestore.EventCrashed, leasestore.EventQuarantined}}},
		{"past the deadline it is refused, after the crash is counted",
			func() *Record { return crashed("w1", 10, 0) },
			func() leasestore.AcquireRequest { q := request("w2"); q.Deadline = t0; return q }(), at(ttl + time.Second),
			want{refusal: new(*leasestore.DeadlineError), crashes: 1, events: []leasestore.EventKind{leasestore.EventCrashed}}},
		{"a success younger than the minimum interval refuses it",
			func() *Record { return &Record{Job: "job", LastSuccess: t0} },
			func() leasestore.AcquireRequest { q := request("w1"); q.MinInterval = time.Hour; return q }(), at(time.Minute),
			want{refusal: new(*leasestore.TooSoonError)}},
		{"evidence that expired unseen is dropped, not counted",
			func() *Record { return crashed("w1", 10, 0) }, request("w2"), at(3*ttl + time.Second),
			want{token: at(3*ttl + time.Second).UnixMicro(), attempt: 2, events: []leasestore.EventKind{leasestore.EventAcquired}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.record()
			step, l, err := Acquire(r, tc.req, tc.now)
			switch w := tc.want.refusal.(type) {
			case nil:
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if l.Token != tc.want.token || l.Attempt != tc.want.attempt {
					t.Errorf("granted token %d attempt %d, want %d and %d", l.Token, l.Attempt, tc.want.token, tc.want.attempt)
				}
				if !r.Live(tc.now) || only(r).Holder != tc.req.Holder || r.LastToken != l.Token {
					t.Errorf("the record does not hold the grant: %+v", r)
				}
			case error:
				if !errors.Is(err, w) {
					t.Fatalf("answered %v, want %v", err, w)
				}
			default:
				if err == nil || !errors.As(err, w) {
					t.Fatalf("answered %v (%T), want a %T", err, err, w)
				}
			}
			if r.Crashes != tc.want.crashes {
				t.Errorf("crashes %d, want %d", r.Crashes, tc.want.crashes)
			}
			if got := kinds(step); !slices.Equal(got, tc.want.events) {
				t.Errorf("events %v, want %v", got, tc.want.events)
			}
		})
	}
}

func TestRenew(t *testing.T) {
	t.Run("a live lease is extended from now, its evidence too, and keeps the round trip", func(t *testing.T) {
		r := running("w1", 10)
		l := lease(r)
		l.RTT = 3 * time.Millisecond
		if _, err := Renew(r, l, at(20*time.Second)); err != nil {
			t.Fatal(err)
		}
		if !only(r).LiveUntil.Equal(at(20*time.Second+ttl)) || !only(r).EvidenceUntil.Equal(at(20*time.Second+3*ttl)) || only(r).RTT != l.RTT {
			t.Errorf("run after renewal: %+v", only(r))
		}
	})
	t.Run("after expiry it is lost, and the late renewal recorded while the evidence is there", func(t *testing.T) {
		r := running("w1", 10)
		step, err := Renew(r, lease(r), at(ttl+time.Second))
		if !errors.Is(err, leasestore.ErrLeaseLost) || !slices.Equal(kinds(step), []leasestore.EventKind{leasestore.EventLeaseLost}) {
			t.Errorf("answered %v with events %v", err, kinds(step))
		}
	})
	t.Run("another run's token is lost, with nothing recorded", func(t *testing.T) {
		r := running("w1", 10)
		l := lease(r)
		l.Token = 9
		step, err := Renew(r, l, at(time.Second))
		if !errors.Is(err, leasestore.ErrLeaseLost) || len(step.Events) != 0 {
			t.Errorf("answered %v with events %v", err, kinds(step))
		}
	})
}

func TestRelease(t *testing.T) {
	tests := []struct {
		name    string
		result  leasestore.Result
		now     time.Time
		crashes int // before
		want    int // after; -1: refused
		success bool
	}{
		{"a completed run resets the crashes and is the last success", leasestore.ResultCompleted, at(time.Second), 2, 0, true},
		{"a failed run keeps the crashes", leasestore.ResultFailed, at(time.Second), 2, 2, false},
		{"a run that could not start keeps the crashes", leasestore.ResultNotStarted, at(time.Second), 1, 1, false},
		{"a crashed run is counted", leasestore.ResultCrashed, at(time.Second), 1, 2, false},
		{"a release after expiry still counts while the evidence is there", leasestore.ResultCompleted, at(ttl + time.Second), 2, 0, true},
		{"a release once the evidence expired is refused", leasestore.ResultCompleted, at(3*ttl + time.Second), 2, -1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := crashed("w1", 10, tc.crashes)
			step, err := Release(r, lease(r), leasestore.Outcome{Result: tc.result}, tc.now)
			if tc.want < 0 {
				if !errors.Is(err, leasestore.ErrLeaseLost) || r.Crashes != tc.crashes {
					t.Fatalf("answered %v, crashes %d", err, r.Crashes)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if only(r) != nil || r.Crashes != tc.want || r.LastSuccess.Equal(tc.now) != tc.success || !step.Wake || !step.Tokens {
				t.Errorf("after release: run %v, crashes %d, last success %v, step %+v", only(r), r.Crashes, r.LastSuccess, step)
			}
			if r.LastOutcome == nil || r.LastOutcome.Result != tc.result || r.LastOutcome.Token != 10 {
				t.Errorf("last outcome %+v", r.LastOutcome)
			}
			if e := step.Events[0]; e.Result != tc.result {
				t.Errorf("the %s event carries %q, want %q", e.Kind, e.Result, tc.result)
			}
		})
	}
	t.Run("another run's token is refused and changes nothing", func(t *testing.T) {
		r := running("w1", 10)
		l := lease(r)
		l.Token = 9
		if _, err := Release(r, l, leasestore.Outcome{Result: leasestore.ResultCompleted}, at(time.Second)); !errors.Is(err, leasestore.ErrLeaseLost) || only(r) == nil {
			t.Errorf("answered %v, run %v", err, only(r))
		}
	})
}

func TestReap(t *testing.T) {
	t.Run("a live run is left alone", func(t *testing.T) {
		r := running("w1", 10)
		if _, c := Reap(r, at(time.Second)); c != nil || only(r) == nil {
			t.Errorf("reaped %+v", c)
		}
	})
	t.Run("evidence without liveness is counted once, at the run's own threshold", func(t *testing.T) {
		r := crashed("w1", 10, 2)
		_, crashes := Reap(r, at(ttl+time.Second))
		if len(crashes) != 1 {
			t.Fatalf("reaped %+v, want one crash", crashes)
		}
		c := crashes[0]
		if c.Crashes != 3 || !c.Quarantined || r.Quarantine == nil || r.Quarantine.By != leasestore.ByLeasectl {
			t.Fatalf("crash %+v, quarantine %+v", c, r.Quarantine)
		}
		if _, again := Reap(r, at(ttl+2*time.Second)); again != nil {
			t.Errorf("counted twice: %+v", again)
		}
	})
	t.Run("expired evidence is dropped without a count", func(t *testing.T) {
		r := crashed("w1", 10, 0)
		if _, c := Reap(r, at(3*ttl+time.Second)); c != nil || only(r) != nil || r.Crashes != 0 {
			t.Errorf("crash %+v, run %v", c, only(r))
		}
	})
}

func TestQuarantine(t *testing.T) {
	r := crashed("w1", 10, 2)
	Quarantine(r, leasestore.Note{By: "oncall", Reason: "first"}, t0)
	since := r.Quarantine.Since
	Quarantine(r, leasestore.Note{By: "lead", Reason: "second"}, at(time.Minute))
	if q := r.Quarantine; q.By != "lead" || q.Reason != "second" || !q.Since.Equal(since) || q.Crashes != 2 {
		t.Errorf("a second note keeps the first's time and takes its words: %+v", q)
	}
	step, err := ReleaseQuarantine(r, leasestore.Note{By: "lead", Reason: "fixed"}, at(2*time.Minute))
	if err != nil || r.Quarantine != nil || r.Crashes != 0 || !step.Wake {
		t.Errorf("release: %v, %+v, crashes %d, step %+v", err, r.Quarantine, r.Crashes, step)
	}
	if _, err := ReleaseQuarantine(r, leasestore.Note{By: "lead"}, at(3*time.Minute)); !errors.Is(err, leasestore.ErrNotQuarantined) {
		t.Errorf("a second release answered %v", err)
	}
}

func TestCheckToken(t *testing.T) {
	r := running("w1", 10)
	if err := CheckToken(r, 10, at(time.Second)); err != nil {
		t.Errorf("the live token: %v", err)
	}
	var stale *leasestore.StaleTokenError
	for _, tc := range []struct {
		token int64
		now   time.Time
	}{{9, at(time.Second)}, {11, at(time.Second)}, {10, at(ttl + time.Second)}} {
		if err := CheckToken(r, tc.token, tc.now); !errors.As(err, &stale) {
			t.Errorf("token %d at %v: %v", tc.token, tc.now, err)
		}
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		record *Record
		now    time.Time
		want   leasestore.State
	}{
		{"never seen", &Record{Job: "job"}, t0, leasestore.StateIdle},
		{"running", running("w1", 10), at(time.Second), leasestore.StateRunning},
		{"crashed, not yet counted", crashed("w1", 10, 0), at(ttl + time.Second), leasestore.StateCrashed},
		{"quarantined, whatever runs", func() *Record {
			r := running("w1", 10)
			Quarantine(r, leasestore.Note{By: "oncall"}, t0)
			return r
		}(), at(time.Second), leasestore.StateQuarantined},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st := Status(tc.record, nil, tc.now); st.State != tc.want {
				t.Errorf("state %s, want %s", st.State, tc.want)
			}
		})
	}
}

func TestStop(t *testing.T) {
	note := leasestore.Note{By: "oncall", Reason: "bad deploy"}
	t.Run("the holder learns it at its next renewal, and the job stays held", func(t *testing.T) {
		r := running("w1", 10)
		step, err := Stop(r, note, at(time.Second))
		if err != nil || !slices.Equal(kinds(step), []leasestore.EventKind{leasestore.EventStop}) || step.Events[0].Token != 10 {
			t.Fatalf("answered %v with events %+v", err, step.Events)
		}
		l := lease(r)
		if _, err := Renew(r, l, at(2*time.Second)); err != nil || l.Stop == nil || l.Stop.By != "oncall" || l.Stop.Reason != "bad deploy" {
			t.Errorf("renewal answered %v, stop %+v", err, l.Stop)
		}
		if _, _, err := Acquire(r, request("w2"), at(3*time.Second)); err == nil {
			t.Error("a run being stopped was granted to another")
		}
		if h := Status(r, nil, at(3*time.Second)).Holder; h == nil || h.Stop == nil {
			t.Errorf("status shows holder %+v", h)
		}
	})
	t.Run("its release is no crash", func(t *testing.T) {
		r := running("w1", 10)
		r.Crashes = 1
		Stop(r, note, at(time.Second))
		out := leasestore.Outcome{Result: leasestore.ResultFailed, Signal: 15, Reason: only(r).Stop.Detail()}
		if _, err := Release(r, lease(r), out, at(2*time.Second)); err != nil || r.Crashes != 1 || r.LastOutcome.Reason != "stopped by oncall: bad deploy" {
			t.Errorf("answered %v, crashes %d, outcome %+v", err, r.Crashes, r.LastOutcome)
		}
	})
	t.Run("a job with no live run is not running", func(t *testing.T) {
		for name, r := range map[string]*Record{"never seen": {Job: "job"}, "expired": crashed("w1", 10, 0)} {
			if _, err := Stop(r, note, at(ttl+time.Second)); !errors.Is(err, leasestore.ErrNotRunning) {
				t.Errorf("%s: answered %v", name, err)
			}
		}
	})
}
