package inspect

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/signame"
	"github.com/leasectl/leasectl/leasestore"
)

// NeverSeen reports whether the store has no record of st's job at all:
// no lease or crash evidence, no token ever granted, no outcome, no
// quarantine, no expectation and no history. A job ID mistyped looks like
// this, and so does a job whose store lost its data.
func NeverSeen(st *leasestore.JobStatus) bool {
	return st.Holder == nil && st.Crashed == nil && st.Quarantine == nil && st.LastOutcome == nil &&
		st.LastToken == 0 && st.Attempts == 0 && st.Crashes == 0 && st.Region == "" &&
		st.LastSuccess.IsZero() && len(st.History) == 0 && st.Expect == nil
}

// Status prints one job's state (IDLE, RUNNING, CRASHED or QUARANTINED),
// its holder, token and TTL left (of a job of several slots, the slots in
// use and free and every holder), its queue of waiters, crash count, last
// outcome and recent history. Ages are relative to the store's clock (st.Now).
func (p *Printer) Status(st *leasestore.JobStatus) error {
	if p.Format == FormatJSON {
		return p.writeJSON(statusView(st))
	}
	now := st.Now
	fields := []field{
		{label: "job", key: "job", value: textCell(st.Job)},
		{label: "state", key: "state", value: stateCell(st.State)},
	}
	if st.Region != "" {
		fields = append(fields, field{label: "region", key: "region", value: textCell(st.Region)})
	}
	switch {
	case st.Holder != nil:
		h := st.Holder
		fields = append(fields,
			field{label: "holder", key: "worker", value: textCell(h.Worker)},
			field{label: "host", key: "host", value: textCell(h.Host)},
			field{label: "pid", key: "pid", value: intCell(int64(h.PID))},
			field{label: "started", key: "started_at", value: agoCell(h.StartedAt, now)},
			field{label: "token", key: "token", value: tokenCell(h.Token)},
			field{label: "ttl left", key: "ttl_left", value: durationCell(max(h.ExpiresAt.Sub(now), 0))},
			field{label: "last rtt", key: "last_rtt", value: rttCell(h.LastRTT)},
		)
		if s := h.Stop; s != nil {
			fields = append(fields,
				field{label: "stopping", key: "stop_requested", value: agoCell(s.At, now)},
				field{label: "stop by", key: "stop_by", value: textCell(s.By)},
				field{label: "stop reason", key: "stop_reason", value: textCell(s.Reason)},
			)
		}
	case st.Crashed != nil:
		c := st.Crashed
		fields = append(fields,
			field{label: "crashed worker", key: "worker", value: textCell(c.Holder)},
			field{label: "host", key: "host", value: textCell(c.Host)},
			field{label: "pid", key: "pid", value: intCell(int64(c.PID))},
			field{label: "started", key: "started_at", value: agoCell(c.StartedAt, now)},
			field{label: "token", key: "token", value: tokenCell(c.Token)},
			field{label: "stale for", key: "stale_for", value: durationCell(staleFor(c, now))},
		)
	default:
		fields = append(fields, field{label: "token", key: "token", value: tokenCell(st.LastToken)})
	}
	fields = append(fields, slotFields(st)...)
	fields = append(fields,
		field{label: "crashes", key: "crashes", value: crashCount(st.Crashes, st.MaxCrashes)},
		field{key: "max_crashes", value: intCell(int64(st.MaxCrashes))},
		field{label: "attempts", key: "attempts", value: intCell(st.Attempts)},
	)
	if q := st.Quarantine; q != nil {
		fields = append(fields,
			field{label: "quarantined", key: "quarantined_since", value: agoCell(q.Since, now)},
			field{label: "by", key: "quarantined_by", value: textCell(q.By)},
			field{label: "reason", key: "quarantine_reason", value: textCell(q.Reason)},
		)
	}
	fields = append(fields, outcomeFields(lastRun(st), now)...)
	fields = append(fields, field{label: "last success", key: "last_success", value: agoCell(st.LastSuccess, now)})
	fields = append(fields, expectFields(st)...)
	return p.writeRecord(fields, st.History, now)
}

// expectFields show the job's expectation and whether it is overdue: on a
// terminal "every 1h, grace 10m" and "yes, due 2h ago" or "no, due in 40m";
// piped as one key per value. None without an expectation.
func expectFields(st *leasestore.JobStatus) []field {
	x := st.Expect
	if x == nil {
		return nil
	}
	due := x.Due(st.LastSuccess)
	overdue := cell{text: "no, due " + relative(due, st.Now), plain: "false", tone: toneGood}
	if st.Overdue() {
		overdue = cell{text: "yes, due " + relative(due, st.Now), plain: "true", tone: toneBad}
	}
	return []field{
		{label: "expected", value: textCell(fmt.Sprintf("every %s, grace %s", shortDuration(x.Every), shortDuration(x.Grace)))},
		{key: "expect_every", value: durationCell(x.Every)},
		{key: "expect_grace", value: durationCell(x.Grace)},
		{key: "due_at", value: agoCell(due, st.Now)},
		{label: "overdue", key: "overdue", value: overdue},
	}
}

func stateCell(s leasestore.State) cell {
	c := textCell(string(s))
	switch s {
	case leasestore.StateRunning:
		c.tone = toneGood
	case leasestore.StateCrashed, leasestore.StateQuarantined:
		c.tone = toneBad
	default:
		c.tone = toneFaint
	}
	return c
}

// lastRun is how the job's last finished run ended: the outcome its
// release recorded, or a crash counted after that release. Acquire and Scan
// count a crash without a release, so the store's last outcome predates
// it; the crash is then known from its history event (result CRASHED, exit
// code -1, no duration, the event's detail as the reason). A crash Release
// counted has both, at the same instant: the outcome, which says more, is
// kept.
func lastRun(st *leasestore.JobStatus) *leasestore.LastOutcome {
	o := st.LastOutcome
	for i := len(st.History) - 1; i >= 0; i-- {
		e := st.History[i]
		if o != nil && !e.At.After(o.FinishedAt) {
			break
		}
		if e.Kind == leasestore.EventCrashed {
			return &leasestore.LastOutcome{
				Outcome: leasestore.Outcome{Result: leasestore.ResultCrashed, ExitCode: -1, Reason: e.Detail},
				Worker:  e.Worker, Token: e.Token, FinishedAt: e.At,
			}
		}
	}
	return o
}

// outcomeFields say how the last run ended: on a terminal in one line
// ("COMPLETED exit 0 after 1.2s, 2h ago", "FAILED signal 15 (SIGTERM)
// after 4s: max-runtime, 3m ago"), piped as one key per value.
func outcomeFields(o *leasestore.LastOutcome, now time.Time) []field {
	if o == nil {
		return []field{{label: "last run", key: "last_result", value: optional("")}}
	}
	var b strings.Builder
	b.WriteString(resultName(o.Result))
	switch {
	case o.Signal != 0:
		fmt.Fprintf(&b, " signal %d", o.Signal)
		if name := signame.Name(syscall.Signal(o.Signal)); name != "" {
			fmt.Fprintf(&b, " (%s)", name)
		}
	case o.ExitCode >= 0:
		fmt.Fprintf(&b, " exit %d", o.ExitCode)
	}
	if o.Duration > 0 {
		fmt.Fprintf(&b, " after %s", shortDuration(o.Duration))
	}
	if o.Reason != "" {
		fmt.Fprintf(&b, ": %s", o.Reason)
	}
	if !o.FinishedAt.IsZero() {
		fmt.Fprintf(&b, ", %s", relative(o.FinishedAt, now))
	}
	summary := cell{text: b.String(), tone: toneBad}
	if o.Result == leasestore.ResultCompleted {
		summary.tone = toneGood
	}
	return []field{
		{label: "last run", value: summary},
		{key: "last_result", value: textCell(resultName(o.Result))},
		{key: "last_exit_code", value: intCell(int64(o.ExitCode))},
		{key: "last_signal", value: intCell(int64(o.Signal))},
		{key: "last_duration", value: durationCell(o.Duration)},
		{key: "last_reason", value: optional(o.Reason)},
		{key: "last_worker", value: optional(o.Worker)},
		{key: "last_token", value: tokenCell(o.Token)},
		{key: "last_finished_at", value: agoCell(o.FinishedAt, now)},
	}
}
