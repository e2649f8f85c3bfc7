package inspect

import (
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Operator names who does an operator action, for the quarantine records:
// "user@host", or "unknown" when the user is not known.
func Operator(user, host string) string {
	switch {
	case user == "":
		return "unknown"
	case host == "":
		return user
	default:
		return user + "@" + host
	}
}

// Quarantines prints the quarantined jobs with their evidence. An empty
// list says "no quarantined jobs".
func (p *Printer) Quarantines(qs []leasestore.Quarantine) error {
	if len(qs) == 0 {
		return p.empty("no quarantined jobs")
	}
	if p.Format == FormatJSON {
		out := make([]quarantineJSON, len(qs))
		for i := range qs {
			out[i] = quarantineView(&qs[i])
		}
		return p.writeJSON(out)
	}
	g := grid{headers: []string{"JOB", "CRASHES", "LAST WORKER", "LAST HOST", "SINCE", "REASON", "BY"}}
	g.text = textColumns(g.headers, "JOB", "LAST WORKER", "LAST HOST", "REASON", "BY")
	for i := range qs {
		q := &qs[i]
		g.rows = append(g.rows, []cell{
			textCell(q.Job), intCell(int64(q.Crashes)), optional(q.LastHolder), optional(q.LastHost),
			agoCell(q.Since, p.Now), textCell(q.Reason), textCell(q.By),
		})
	}
	return p.writeGrid(g)
}

type quarantineDetailJSON struct {
	quarantineJSON
	MaxCrashes int         `json:"max_crashes"`
	History    []eventJSON `json:"history"`
}

// Quarantine prints one quarantined job: its quarantine record, crash
// count and recent history. st.Quarantine must not be nil.
func (p *Printer) Quarantine(st *leasestore.JobStatus) error {
	q := st.Quarantine
	if q == nil {
		return fmt.Errorf("job %q is not quarantined", st.Job)
	}
	if p.Format == FormatJSON {
		return p.writeJSON(quarantineDetailJSON{
			quarantineJSON: quarantineView(q), MaxCrashes: st.MaxCrashes, History: historyView(st.History),
		})
	}
	fields := []field{
		{label: "job", key: "job", value: textCell(q.Job)},
		{label: "quarantined", key: "since", value: agoCell(q.Since, st.Now)},
		{label: "by", key: "by", value: textCell(q.By)},
		{label: "reason", key: "reason", value: textCell(q.Reason)},
		{label: "crashes", key: "crashes", value: crashCount(q.Crashes, st.MaxCrashes)},
		{key: "max_crashes", value: intCell(int64(st.MaxCrashes))},
		{label: "last worker", key: "last_worker", value: optional(q.LastHolder)},
		{label: "last host", key: "last_host", value: optional(q.LastHost)},
	}
	return p.writeRecord(fields, st.History, st.Now)
}

// crashCount shows "2 of 3" on a terminal and "2" when piped (the
// threshold has its own field there).
func crashCount(n, of int) cell {
	c := intCell(int64(n))
	if of > 0 {
		c.text = fmt.Sprintf("%d of %d", n, of)
	}
	return c
}

// ActionQuarantined, ActionReleased and ActionStopRequested name what an
// operator did.
const (
	ActionQuarantined   = "quarantined"
	ActionReleased      = "released"
	ActionStopRequested = "stop-requested"
	// ActionExpectationSet and ActionExpectationCleared: `leasectl expect`.
	ActionExpectationSet     = "expectation-set"
	ActionExpectationCleared = "expectation-cleared"
)

// Action is an operator's decision on a job, as confirmed to them.
type Action struct {
	Job    string
	Action string // one of the Action constants
	By     string
	Reason string
	At     time.Time
	// Expect is the expectation set, for ActionExpectationSet.
	Expect *leasestore.Expectation
}

type actionJSON struct {
	Job    string   `json:"job"`
	Action string   `json:"action"`
	By     string   `json:"by"`
	Reason string   `json:"reason"`
	At     jsonTime `json:"at"`
	// EveryMS and GraceMS: the expectation set (expectation-set only).
	EveryMS int64 `json:"every_ms,omitempty"`
	GraceMS int64 `json:"grace_ms,omitempty"`
}

// Action confirms an operator action: one line on stderr (stdout stays
// empty for scripts), or the JSON object on stdout with --json.
func (p *Printer) Action(a Action) error {
	if p.Format == FormatJSON {
		j := actionJSON{Job: a.Job, Action: a.Action, By: a.By, Reason: a.Reason, At: jsonTime(a.At)}
		if a.Expect != nil {
			j.EveryMS, j.GraceMS = a.Expect.Every.Milliseconds(), a.Expect.Grace.Milliseconds()
		}
		return p.writeJSON(j)
	}
	var msg string
	switch a.Action {
	case ActionReleased:
		msg = fmt.Sprintf("released job %s from quarantine; its crash count is reset (by %s: %s)", a.Job, a.By, a.Reason)
	case ActionStopRequested:
		msg = fmt.Sprintf("asked job %s to stop: its holder stops the child at its next renewal, SIGTERM then SIGKILL after its --grace (by %s: %s)", a.Job, a.By, a.Reason)
	case ActionExpectationSet:
		msg = fmt.Sprintf("job %s must succeed every %s: overdue %s after its last success (%s)", a.Job, a.Expect.Every,
			a.Expect.Every+a.Expect.Grace, byWhom(a))
	case ActionExpectationCleared:
		msg = fmt.Sprintf("job %s has no expectation any more: it is never overdue (%s)", a.Job, byWhom(a))
	default:
		msg = fmt.Sprintf("quarantined job %s: `leasectl run` refuses it (exit 76) until `leasectl quarantine release %s` (by %s: %s)", a.Job, a.Job, a.By, a.Reason)
	}
	_, err := fmt.Fprintln(p.ErrOut, msg)
	return err
}

// byWhom is who did a and why: "by alice@host: reason", or without a
// reason "by alice@host".
func byWhom(a Action) string {
	if a.Reason == "" {
		return "by " + a.By
	}
	return "by " + a.By + ": " + a.Reason
}

// optional shows s, or "-" on a terminal and an empty field when piped
// when s is empty.
func optional(s string) cell {
	if s == "" {
		return cell{text: "-"}
	}
	return textCell(s)
}

// tokenCell shows a fencing token; 0 means none.
func tokenCell(t int64) cell {
	if t == 0 {
		return optional("")
	}
	return intCell(t)
}
