package inspect

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The types below are the JSON schema documented in doc.go. Keys are
// snake_case, times RFC 3339 in UTC with milliseconds (null when unknown),
// durations integer milliseconds in keys ending in _ms. Adding a key is a
// compatible change; renaming or removing one is not.

// jsonTime is a time that marshals as RFC 3339, or null when zero.
type jsonTime time.Time

// MarshalJSON writes t as an RFC 3339 string in UTC, or null when zero.
func (t jsonTime) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(formatTime(time.Time(t)))
}

func millis(d time.Duration) int64 { return d.Milliseconds() }

// command is never null in JSON.
func command(c []string) []string {
	if c == nil {
		return []string{}
	}
	return c
}

type crashJSON struct {
	Job         string   `json:"job"`
	Worker      string   `json:"worker"`
	Host        string   `json:"host"`
	PID         int      `json:"pid"`
	Token       int64    `json:"token"`
	Command     []string `json:"command"`
	StartedAt   jsonTime `json:"started_at"`
	StaleSince  jsonTime `json:"stale_since"`
	DetectedAt  jsonTime `json:"detected_at"`
	StaleForMS  int64    `json:"stale_for_ms"`
	Crashes     int      `json:"crashes"`
	Quarantined bool     `json:"quarantined"`
}

// staleFor is how long c's run had been without liveness when now is the
// store's clock.
func staleFor(c *leasestore.Crash, now time.Time) time.Duration {
	if c.StaleSince.IsZero() {
		return 0
	}
	return now.Sub(c.StaleSince)
}

// crashView converts c; now is the store's clock (c.DetectedAt once the
// crash is counted).
func crashView(c *leasestore.Crash, now time.Time) crashJSON {
	return crashJSON{
		Job: c.Job, Worker: c.Holder, Host: c.Host, PID: c.PID, Token: c.Token,
		Command:   command(c.Command),
		StartedAt: jsonTime(c.StartedAt), StaleSince: jsonTime(c.StaleSince), DetectedAt: jsonTime(c.DetectedAt),
		StaleForMS: millis(staleFor(c, now)),
		Crashes:    c.Crashes, Quarantined: c.Quarantined,
	}
}

type quarantineJSON struct {
	Job        string   `json:"job"`
	Crashes    int      `json:"crashes"`
	Since      jsonTime `json:"since"`
	Reason     string   `json:"reason"`
	By         string   `json:"by"`
	LastWorker string   `json:"last_worker"`
	LastHost   string   `json:"last_host"`
}

func quarantineView(q *leasestore.Quarantine) quarantineJSON {
	return quarantineJSON{
		Job: q.Job, Crashes: q.Crashes, Since: jsonTime(q.Since), Reason: q.Reason, By: q.By,
		LastWorker: q.LastHolder, LastHost: q.LastHost,
	}
}

type leaseJSON struct {
	Job          string   `json:"job"`
	Worker       string   `json:"worker"`
	Host         string   `json:"host"`
	PID          int      `json:"pid"`
	Token        int64    `json:"token"`
	Attempt      int64    `json:"attempt"`
	Slot         int      `json:"slot"`
	Command      []string `json:"command"`
	StartedAt    jsonTime `json:"started_at"`
	ExpiresAt    jsonTime `json:"expires_at"`
	RunningForMS int64    `json:"running_for_ms"`
	TTLLeftMS    int64    `json:"ttl_left_ms"`
	// LastRTTMS is the holder's last renewal round trip, in milliseconds
	// with a fraction; 0 when the store has none.
	LastRTTMS float64 `json:"last_rtt_ms"`
	// Stop is an operator's request that the run stop; absent when none.
	Stop *stopJSON `json:"stop,omitempty"`
	// Overdue: the job is past its expectation (ls only).
	Overdue bool `json:"overdue,omitempty"`
}

type stopJSON struct {
	By          string   `json:"by"`
	Reason      string   `json:"reason"`
	RequestedAt jsonTime `json:"requested_at"`
}

func leaseView(h *leasestore.Holder, now time.Time) leaseJSON {
	v := leaseJSON{
		Job: h.Job, Worker: h.Worker, Host: h.Host, PID: h.PID, Token: h.Token, Attempt: h.Attempt, Slot: h.Slot,
		Command:   command(h.Command),
		StartedAt: jsonTime(h.StartedAt), ExpiresAt: jsonTime(h.ExpiresAt),
		RunningForMS: millis(max(now.Sub(h.StartedAt), 0)),
		TTLLeftMS:    millis(max(h.ExpiresAt.Sub(now), 0)),
		LastRTTMS:    float64(h.LastRTT.Microseconds()) / 1000,
	}
	if s := h.Stop; s != nil {
		v.Stop = &stopJSON{By: s.By, Reason: s.Reason, RequestedAt: jsonTime(s.At)}
	}
	return v
}

type outcomeJSON struct {
	Result     string   `json:"result"`
	ExitCode   int      `json:"exit_code"`
	Signal     int      `json:"signal"`
	DurationMS int64    `json:"duration_ms"`
	Reason     string   `json:"reason"`
	Worker     string   `json:"worker"`
	Token      int64    `json:"token"`
	FinishedAt jsonTime `json:"finished_at"`
}

// resultName is a run's result as shown to people and in JSON:
// COMPLETED, FAILED, CRASHED or NOT-STARTED.
func resultName(r leasestore.Result) string { return strings.ToUpper(string(r)) }

func outcomeView(o *leasestore.LastOutcome) *outcomeJSON {
	if o == nil {
		return nil
	}
	return &outcomeJSON{
		Result: resultName(o.Result), ExitCode: o.ExitCode, Signal: o.Signal,
		DurationMS: millis(o.Duration), Reason: o.Reason, Worker: o.Worker, Token: o.Token,
		FinishedAt: jsonTime(o.FinishedAt),
	}
}

type eventJSON struct {
	At     jsonTime `json:"at"`
	Event  string   `json:"event"`
	Worker string   `json:"worker"`
	Token  int64    `json:"token"`
	Detail string   `json:"detail"`
}

func historyView(events []leasestore.Event) []eventJSON {
	out := make([]eventJSON, len(events))
	for i, e := range events {
		out[i] = eventJSON{At: jsonTime(e.At), Event: string(e.Kind), Worker: e.Worker, Token: e.Token, Detail: e.Detail}
	}
	return out
}

type statusJSON struct {
	Job         string          `json:"job"`
	State       string          `json:"state"`
	Region      string          `json:"region"`
	Now         jsonTime        `json:"now"`
	Holder      *leaseJSON      `json:"holder"`
	Slots       int             `json:"slots"`
	Holders     []leaseJSON     `json:"holders"`
	Queue       []waiterJSON    `json:"queue"`
	Crashed     *crashJSON      `json:"crashed"`
	Token       int64           `json:"token"`
	Attempts    int64           `json:"attempts"`
	Crashes     int             `json:"crashes"`
	MaxCrashes  int             `json:"max_crashes"`
	Quarantine  *quarantineJSON `json:"quarantine"`
	LastOutcome *outcomeJSON    `json:"last_outcome"`
	LastSuccess jsonTime        `json:"last_success"`
	History     []eventJSON     `json:"history"`
	// Expect is the job's expectation, null when none; Overdue whether
	// the job is past it.
	Expect  *expectJSON `json:"expect"`
	Overdue bool        `json:"overdue"`
}

type expectJSON struct {
	EveryMS int64    `json:"every_ms"`
	GraceMS int64    `json:"grace_ms"`
	Since   jsonTime `json:"since"`
	DueAt   jsonTime `json:"due_at"`
}

func statusView(st *leasestore.JobStatus) statusJSON {
	v := statusJSON{
		Job: st.Job, State: string(st.State), Region: st.Region, Now: jsonTime(st.Now),
		Token: st.LastToken, Attempts: st.Attempts, Crashes: st.Crashes, MaxCrashes: st.MaxCrashes,
		LastOutcome: outcomeView(lastRun(st)), LastSuccess: jsonTime(st.LastSuccess),
		History: historyView(st.History),
		Slots:   max(st.Slots, 1), Holders: holdersView(st), Queue: queueView(st.Queue, st.Now),
	}
	if st.Holder != nil {
		h := leaseView(st.Holder, st.Now)
		v.Holder = &h
	}
	if st.Crashed != nil {
		c := crashView(st.Crashed, st.Now)
		v.Crashed = &c
	}
	if st.Quarantine != nil {
		q := quarantineView(st.Quarantine)
		v.Quarantine = &q
	}
	if x := st.Expect; x != nil {
		v.Expect = &expectJSON{EveryMS: millis(x.Every), GraceMS: millis(x.Grace), Since: jsonTime(x.Since),
			DueAt: jsonTime(x.Due(st.LastSuccess))}
		v.Overdue = st.Overdue()
	}
	return v
}
