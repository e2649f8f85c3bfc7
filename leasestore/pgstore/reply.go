package pgstore

import (
	"encoding/json"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The functions answer in JSON (sql/*.sql say what each returns); these
// are its shapes. Times are microseconds since the Unix epoch, 0 for none.

// usTime is a time in microseconds since the Unix epoch; 0 is the zero time.
func usTime(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// acquireReply is acquire's answer.
type acquireReply struct {
	Kind        string          `json:"k"`
	Now         int64           `json:"now"`
	Token       int64           `json:"token"`
	Attempt     int64           `json:"attempt"`
	Slot        int             `json:"slot"`
	Recovered   *crashReply     `json:"recovered"`
	Slots       int             `json:"slots"`
	Position    int             `json:"position"`
	Waiting     int             `json:"waiting"`
	Holder      *string         `json:"holder"` // null: a slot is free, but promised to earlier waiters
	Host        string          `json:"host"`
	PID         int             `json:"pid"`
	Since       int64           `json:"since"`
	Expires     int64           `json:"expires"`
	Quarantine  quarantineReply `json:"q"`
	LastSuccess int64           `json:"last_success"`
	Region      string          `json:"region"`
}

// held is the refusal a held answer describes, at now.
func (a *acquireReply) held(job string, now time.Time) *leasestore.HeldError {
	err := &leasestore.HeldError{Job: job, Slots: a.Slots, Position: a.Position, Waiting: a.Waiting}
	if a.Holder != nil {
		err.Holder, err.Host, err.PID, err.Token = *a.Holder, a.Host, a.PID, a.Token
		err.Since, err.ExpiresIn = usTime(a.Since), usTime(a.Expires).Sub(now)
	}
	return err
}

// checkTokenReply is checktoken's answer.
type checkTokenReply struct {
	Current int64 `json:"current"`
	Live    bool  `json:"live"`
	OK      bool  `json:"ok"`
}

// crashReply is a crash as _count_crashes describes it.
type crashReply struct {
	Job         string   `json:"job"`
	Holder      string   `json:"holder"`
	Host        string   `json:"host"`
	PID         int      `json:"pid"`
	Token       int64    `json:"token"`
	Command     []string `json:"command"`
	Started     int64    `json:"started"`
	Stale       int64    `json:"stale"`
	Detected    int64    `json:"detected"`
	Crashes     int      `json:"crashes"`
	Quarantined bool     `json:"quarantined"`
}

func (c *crashReply) crash() *leasestore.Crash {
	return &leasestore.Crash{
		Job: c.Job, Holder: c.Holder, Host: c.Host, PID: c.PID, Token: c.Token, Command: c.Command,
		StartedAt: usTime(c.Started), StaleSince: usTime(c.Stale), DetectedAt: usTime(c.Detected),
		Crashes: c.Crashes, Quarantined: c.Quarantined,
	}
}

// quarantineReply is a quarantine as _quarantine_json describes it.
type quarantineReply struct {
	Job        string `json:"job"`
	Since      int64  `json:"since"`
	Reason     string `json:"reason"`
	By         string `json:"by"`
	Crashes    int    `json:"crashes"`
	LastHolder string `json:"last_holder"`
	LastHost   string `json:"last_host"`
}

func (q quarantineReply) quarantine() leasestore.Quarantine {
	return leasestore.Quarantine{Job: q.Job, Crashes: q.Crashes, Since: usTime(q.Since), Reason: q.Reason, By: q.By,
		LastHolder: q.LastHolder, LastHost: q.LastHost}
}

// scanReply is a scan batch's answer.
type scanReply struct {
	Examined int          `json:"examined"`
	Crashes  []crashReply `json:"crashes"`
}

// runReply is a run as status and leases describe it.
type runReply struct {
	Job     string   `json:"job"`
	Slot    int      `json:"slot"`
	Holder  string   `json:"holder"`
	Host    string   `json:"host"`
	PID     int      `json:"pid"`
	Token   int64    `json:"token"`
	Attempt int64    `json:"attempt"`
	Command []string `json:"command"`
	Started int64    `json:"started"`
	Expires int64    `json:"expires"`
	RTT     int64    `json:"rtt_us"` // the holder's last renewal round trip; 0: none yet
	stopReply
	Live     bool `json:"live"`
	Evidence bool `json:"evidence"`
}

// stopReply is an operator's request that a run stop, as renew and status
// answer it; all null when none was made.
type stopReply struct {
	By     *string `json:"stop_by"`
	Reason string  `json:"stop_reason"`
	At     int64   `json:"stop_at"`
}

// request is the stop request, nil when none was made.
func (s stopReply) request() *leasestore.StopRequest {
	if s.By == nil {
		return nil
	}
	return &leasestore.StopRequest{By: *s.By, Reason: s.Reason, At: usTime(s.At)}
}

// renewReply is renew's answer: true, false, or a stop request (which
// also means renewed).
type renewReply struct {
	renewed bool
	stop    *leasestore.StopRequest
}

// UnmarshalJSON decodes the answer's three forms.
func (r *renewReply) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &r.renewed); err == nil {
		return nil
	}
	var s stopReply
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	r.renewed, r.stop = true, s.request()
	return nil
}

func (r *runReply) holder(job string) *leasestore.Holder {
	return &leasestore.Holder{Job: job, Worker: r.Holder, Host: r.Host, PID: r.PID, Token: r.Token, Attempt: r.Attempt,
		Slot: r.Slot, Command: r.Command, StartedAt: usTime(r.Started), ExpiresAt: usTime(r.Expires),
		LastRTT: time.Duration(r.RTT) * time.Microsecond, Stop: r.stopReply.request()}
}

// leasesReply is leases' answer.
type leasesReply struct {
	Now    int64      `json:"now"`
	Leases []runReply `json:"leases"`
}

// statusReply is status's answer.
type statusReply struct {
	Now int64 `json:"now"`
	Job *struct {
		Region      string           `json:"region"` // null: none
		Slots       int              `json:"slots"`
		LastToken   int64            `json:"last_token"`
		Attempts    int64            `json:"attempts"`
		Crashes     int              `json:"crashes"`
		MaxCrashes  int              `json:"max_crashes"`
		LastSuccess int64            `json:"last_success"`
		ExpectEvery *int64           `json:"x_every_us"` // null: no expectation
		ExpectGrace int64            `json:"x_grace_us"`
		ExpectSince int64            `json:"x_since"`
		Quarantine  *quarantineReply `json:"q"`
		Outcome     *struct {
			Result     string `json:"result"`
			ExitCode   int    `json:"exit_code"`
			Signal     int    `json:"signal"`
			DurationNS int64  `json:"duration_ns"`
			Reason     string `json:"reason"`
			Worker     string `json:"worker"`
			Token      int64  `json:"token"`
			Finished   int64  `json:"finished"`
		} `json:"o"`
	} `json:"job"`
	Runs  []runReply `json:"runs"` // by slot
	Queue []struct {
		Worker string `json:"worker"`
		Host   string `json:"host"`
		PID    int    `json:"pid"`
		Since  int64  `json:"since"`
		Until  int64  `json:"until"`
	} `json:"queue"`
	History []struct {
		At     int64  `json:"at"`
		Kind   string `json:"kind"`
		Worker string `json:"worker"`
		Token  int64  `json:"token"`
		Result string `json:"result"` // null: none, or recorded before schema version 3
		Detail string `json:"detail"`
	} `json:"history"`
}

// status is the JobStatus the answer describes.
func (r *statusReply) status(job string) *leasestore.JobStatus {
	now := usTime(r.Now)
	st := &leasestore.JobStatus{Job: job, State: leasestore.StateIdle, Now: now, Slots: 1}
	for _, e := range r.History {
		st.History = append(st.History, leasestore.Event{At: usTime(e.At), Kind: leasestore.EventKind(e.Kind),
			Worker: e.Worker, Token: e.Token, Result: leasestore.Result(e.Result), Detail: e.Detail})
	}
	for _, w := range r.Queue {
		st.Queue = append(st.Queue, leasestore.Waiter{Worker: w.Worker, Host: w.Host, PID: w.PID, Since: usTime(w.Since),
			Until: usTime(w.Until)})
	}
	if j := r.Job; j != nil {
		st.LastToken, st.Attempts, st.Crashes, st.MaxCrashes = j.LastToken, j.Attempts, j.Crashes, j.MaxCrashes
		st.LastSuccess = usTime(j.LastSuccess)
		st.Region = j.Region
		st.Slots = max(j.Slots, 1)
		st.Expect = expectation(j.ExpectEvery, j.ExpectGrace, j.ExpectSince)
		if j.Quarantine != nil {
			q := j.Quarantine.quarantine()
			st.Quarantine = &q
			st.State = leasestore.StateQuarantined
		}
		if o := j.Outcome; o != nil {
			st.LastOutcome = &leasestore.LastOutcome{
				Outcome: leasestore.Outcome{Result: leasestore.Result(o.Result), ExitCode: o.ExitCode, Signal: o.Signal,
					Duration: time.Duration(o.DurationNS), Reason: o.Reason},
				Worker: o.Worker, Token: o.Token, FinishedAt: usTime(o.Finished),
			}
		}
	}
	var crashed *runReply
	for i := range r.Runs {
		switch run := &r.Runs[i]; {
		case run.Live:
			st.Holders = append(st.Holders, *run.holder(job))
		case run.Evidence && crashed == nil:
			crashed = run
		}
	}
	if len(st.Holders) > 0 {
		st.Holder = &st.Holders[0]
	}
	switch {
	case st.State != leasestore.StateIdle:
	case st.Holder != nil:
		st.State = leasestore.StateRunning
	case crashed != nil:
		// An uncounted crash, reported as it would be counted; as the
		// rules do, only when it is what the state shows.
		st.State = leasestore.StateCrashed
		st.Crashed = &leasestore.Crash{Job: job, Holder: crashed.Holder, Host: crashed.Host, PID: crashed.PID,
			Token: crashed.Token, Command: crashed.Command, StartedAt: usTime(crashed.Started),
			StaleSince: usTime(crashed.Expires), DetectedAt: now, Crashes: st.Crashes + 1}
	}
	return st
}
