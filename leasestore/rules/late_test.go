package rules

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// story is a job's record and history as a store keeps them, for the rules
// that read the history.
type story struct {
	t       *testing.T
	r       *Record
	history []leasestore.Event
	now     time.Time
}

func newStory(t *testing.T) *story { return &story{t: t, r: &Record{Job: "job"}, now: t0} }

func (s *story) keep(step Step) {
	s.history = append(s.history, step.Events...)
	s.now = s.now.Add(time.Second)
}

// crash grants holder a run that its supervisor abandons, and counts the
// crash as the next acquire would: it returns the run's token.
func (s *story) crash(holder string) int64 {
	step, l, err := Acquire(s.r, request(holder), s.now)
	if err != nil {
		s.t.Fatal(err)
	}
	s.keep(step)
	s.now = s.now.Add(ttl)
	step, _ = Reap(s.r, s.now)
	s.keep(step)
	return l.Token
}

// run grants holder a run that ends with result.
func (s *story) run(holder string, result leasestore.Result) {
	step, l, err := Acquire(s.r, request(holder), s.now)
	if err != nil {
		s.t.Fatal(err)
	}
	s.keep(step)
	step, err = Release(s.r, l, leasestore.Outcome{Result: result}, s.now)
	if err != nil {
		s.t.Fatal(err)
	}
	s.keep(step)
}

func (s *story) late(holder string, token int64, result leasestore.Result) leasestore.Correction {
	step, c := RecordLate(s.r, s.history, leasestore.LateOutcome{Job: "job", Holder: holder, Token: token,
		Outcome: leasestore.Outcome{Result: result, Duration: time.Second}}, s.now)
	s.keep(step)
	return c
}

func TestRecordLate(t *testing.T) {
	t.Run("while the run's evidence is there it is a release", func(t *testing.T) {
		s := newStory(t)
		step, l, _ := Acquire(s.r, request("w1"), s.now)
		s.keep(step)
		if c := s.late("w1", l.Token, leasestore.ResultFailed); !c.Released || only(s.r) != nil {
			t.Errorf("correction %+v, run %v", c, only(s.r))
		}
	})
	t.Run("a counted crash is withdrawn", func(t *testing.T) {
		s := newStory(t)
		s.crash("w1")
		token := s.crash("w2")
		if c := s.late("w2", token, leasestore.ResultFailed); !c.CrashWithdrawn || c.Crashes != 1 || s.r.Crashes != 1 {
			t.Errorf("correction %+v, crashes %d", c, s.r.Crashes)
		}
		if c := s.late("w2", token, leasestore.ResultFailed); c.CrashWithdrawn || s.r.Crashes != 1 {
			t.Errorf("delivered twice: correction %+v, crashes %d", c, s.r.Crashes)
		}
	})
	t.Run("the quarantine leasectl made with the crash is lifted", func(t *testing.T) {
		s := newStory(t)
		s.crash("w1")
		s.crash("w2")
		token := s.crash("w3")
		if s.r.Quarantine == nil {
			t.Fatal("three crashes did not quarantine the job")
		}
		c := s.late("w3", token, leasestore.ResultFailed)
		if !c.QuarantineLifted || s.r.Quarantine != nil || s.r.Crashes != 2 {
			t.Errorf("correction %+v, quarantine %+v", c, s.r.Quarantine)
		}
	})
	t.Run("an operator's quarantine stays", func(t *testing.T) {
		s := newStory(t)
		token := s.crash("w1")
		s.keep(Quarantine(s.r, leasestore.Note{By: "oncall", Reason: "look first"}, s.now))
		if c := s.late("w1", token, leasestore.ResultFailed); c.QuarantineLifted || s.r.Quarantine == nil {
			t.Errorf("correction %+v", c)
		}
	})
	t.Run("a late completion leaves only the crashes counted after it", func(t *testing.T) {
		s := newStory(t)
		token := s.crash("w1")
		s.crash("w2")
		if c := s.late("w1", token, leasestore.ResultCompleted); c.Crashes != 1 || s.r.LastSuccess.IsZero() {
			t.Errorf("correction %+v, last success %v", c, s.r.LastSuccess)
		}
	})
	t.Run("a completion after the crash ended its streak: nothing to withdraw", func(t *testing.T) {
		s := newStory(t)
		token := s.crash("w1")
		s.run("w2", leasestore.ResultCompleted)
		s.crash("w3")
		if c := s.late("w1", token, leasestore.ResultFailed); c.CrashWithdrawn || s.r.Crashes != 1 {
			t.Errorf("correction %+v, crashes %d", c, s.r.Crashes)
		}
	})
	t.Run("a failure after the crash did not end its streak", func(t *testing.T) {
		s := newStory(t)
		token := s.crash("w1")
		s.run("w2", leasestore.ResultFailed)
		if c := s.late("w1", token, leasestore.ResultFailed); !c.CrashWithdrawn || s.r.Crashes != 0 {
			t.Errorf("correction %+v, crashes %d", c, s.r.Crashes)
		}
	})
	t.Run("a run that released itself as crashed has its outcome recorded: delivering it again withdraws nothing", func(t *testing.T) {
		s := newStory(t)
		step, l, _ := Acquire(s.r, request("w1"), s.now)
		s.keep(step)
		step, _ = Release(s.r, l, leasestore.Outcome{Result: leasestore.ResultCrashed, Signal: 11}, s.now)
		s.keep(step)
		if c := s.late("w1", l.Token, leasestore.ResultCrashed); c.CrashWithdrawn || s.r.Crashes != 1 {
			t.Errorf("correction %+v, crashes %d; want nothing withdrawn, 1 crash", c, s.r.Crashes)
		}
	})
	t.Run("events recorded before they carried their outcome are read by their words", func(t *testing.T) {
		s := newStory(t)
		token := s.crash("w1")
		s.run("w2", leasestore.ResultCompleted)
		for i := range s.history {
			s.history[i].Result = ""
		}
		if c := s.late("w1", token, leasestore.ResultFailed); c.CrashWithdrawn {
			t.Errorf("correction %+v: a completion recorded before Event.Result ended the streak", c)
		}
	})
	t.Run("a holder that gave up without its token is refused from then on", func(t *testing.T) {
		s := newStory(t)
		s.late("w1", 0, leasestore.ResultNotStarted)
		if _, _, err := Acquire(s.r, request("w1"), s.now); err == nil {
			t.Error("the holder that gave up was granted")
		}
	})
}
