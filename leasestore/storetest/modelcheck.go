package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// How the model-based test compares the store with the rules: what the
// contract fixes, in words, with the store's tokens named by the grant of
// the model they are mapped to. Left out, and why:
//   - times (At, Since, ExpiresAt, FinishedAt, Now...): the store's clock
//     is not the model's (and etcd reports ExpiresAt from its etcd lease's
//     TTL left); only whether LastSuccess is set is compared, and whether
//     an expectation's since moved (compareSince); the overdue jobs are
//     compared with the store's own statuses (compareOverdue);
//   - history details and Event.Result: the details are for people, and
//     Redis and PostgreSQL do not record an event's Result yet (they
//     decide from its detail); an event is its kind, worker and run;
//   - the refusals' data beyond who holds or quarantined the job (a
//     HeldError's ExpiresIn is etcd's TTL left, for one);
//   - a holder's exact last round trip (describeRoundTrip), and Crashed
//     outside state CRASHED (describeStatus).

// compareAnswers fails the test when the store's answer to a call is not
// the rules' answer.
func (ls *lockstep) compareAnswers(t *testing.T, what string, storeErr, modelErr error) {
	t.Helper()
	got, want := answer(storeErr, ls.storeLabel), answer(modelErr, ls.label)
	if got != want {
		ls.fail(t, what+": the answers differ", got, want)
	}
	ls.logf("  → %s", want)
	kind, _ := answerKind(modelErr, ls.label)
	ls.seen[what+": "+kind]++
}

// answer is what an answer says in the terms the rules fix: success, or
// the refusal's type and whom it names, tokens named by label.
func answer(err error, label func(int64) string) string {
	kind, detail := answerKind(err, label)
	if detail == "" {
		return kind
	}
	return kind + " " + detail
}

// answerKind is an answer's kind ("ok", "held", "lease lost"...) and what
// the refusal names.
func answerKind(err error, label func(int64) string) (kind, detail string) {
	var (
		held        *leasestore.HeldError
		quarantined *leasestore.QuarantinedError
		region      *leasestore.RegionError
		deadline    *leasestore.DeadlineError
		tooSoon     *leasestore.TooSoonError
		stale       *leasestore.StaleTokenError
		slots       *leasestore.SlotsError
	)
	switch {
	case err == nil:
		return "ok", ""
	case errors.As(err, &held) && held.Position > 0:
		return "held, waiting in the queue", fmt.Sprintf("by %s (%s) of %d slots, waiting %d of %d", held.Holder, label(held.Token), max(held.Slots, 1), held.Position, held.Waiting)
	case errors.As(err, &held):
		return "held", fmt.Sprintf("by %s (%s) of %d slots, waiting %d of %d", held.Holder, label(held.Token), max(held.Slots, 1), held.Position, held.Waiting)
	case errors.As(err, &slots):
		return "of another number of slots", fmt.Sprintf("(%d, asked %d)", slots.Slots, slots.Requested)
	case errors.As(err, &quarantined):
		return "quarantined", fmt.Sprintf("by %s after %d crashes", quarantined.By, quarantined.Crashes)
	case errors.As(err, &region):
		return "of another region", fmt.Sprintf("(%s, asked from %s)", region.Region, region.Requested)
	case errors.As(err, &deadline):
		return "past the deadline", ""
	case errors.As(err, &tooSoon):
		return "too soon after the last success", ""
	case errors.As(err, &stale):
		return "stale token", fmt.Sprintf("(the current one is %s, live %v)", label(stale.Current), stale.Live)
	case errors.Is(err, leasestore.ErrLeaseLost):
		return "lease lost", ""
	case errors.Is(err, leasestore.ErrNotQuarantined):
		return "not quarantined", ""
	default:
		return "unexpected error", err.Error()
	}
}

// describeCorrection is every field of a correction (its String says only
// the main one).
func describeCorrection(c leasestore.Correction) string {
	return fmt.Sprintf("released %v, crash withdrawn %v, quarantine lifted %v, %d consecutive crashes",
		c.Released, c.CrashWithdrawn, c.QuarantineLifted, c.Crashes)
}

// describeCrash is a counted crash in the terms the rules fix.
func (ls *lockstep) describeCrash(c *leasestore.Crash, label func(int64) string) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s of %s (%s): crash %d, quarantined %v", c.Job, c.Holder, label(c.Token), c.Crashes, c.Quarantined)
}

// compareStatus fails the test when the store's status of job is not what
// the rules say of the model's record.
func (ls *lockstep) compareStatus(t *testing.T, job string) {
	t.Helper()
	m := ls.model[job]
	store, model := Status(t, ls.operator, job), rules.Status(&m.rec, m.history, ls.now)
	got := ls.describeStatus(store, ls.storeLabel, func(token int64) int64 { return ls.tokens[token] })
	want := ls.describeStatus(model, ls.label, func(token int64) int64 { return token })
	var diff []string
	for i := range got {
		if got[i] != want[i] {
			diff = append(diff, fmt.Sprintf("  the store: %s\n  the rules: %s", got[i], want[i]))
		}
	}
	if len(diff) > 0 {
		ls.logf("  DIVERGES: the status of %s", job)
		t.Fatalf("step %d: the status of %s:\n%s", ls.step, job, strings.Join(diff, "\n"))
	}
	ls.compareSince(t, job, store, model)
}

// describeStatus is a status in the terms the rules fix, one line per
// part, in the same order whatever the status; label names a token of the
// status, toModel maps it to the model's.
func (ls *lockstep) describeStatus(st *leasestore.JobStatus, label func(int64) string, toModel func(int64) int64) []string {
	success := "never succeeded"
	if !st.LastSuccess.IsZero() {
		success = "succeeded"
	}
	lines := []string{
		fmt.Sprintf("state %s", st.State),
		fmt.Sprintf("crashes %d, attempts %d, max crashes %d, last token %s, region %q, %s",
			st.Crashes, st.Attempts, st.MaxCrashes, label(st.LastToken), st.Region, success),
		"holder: none",
		"quarantine: none",
		"last outcome: none",
		"crashed: not reported",
		describeExpect(st.Expect),
	}
	if h := st.Holder; h != nil {
		lines[2] = fmt.Sprintf("holder: %s (%s), attempt %d", h.Worker, label(h.Token), h.Attempt)
		lines[2] += ", " + ls.describeRoundTrip(h.LastRTT, toModel(h.Token))
	}
	if q := st.Quarantine; q != nil {
		lines[3] = fmt.Sprintf("quarantine: by %s after %d crashes, last holder %s, reason %q", q.By, q.Crashes, q.LastHolder, q.Reason)
	}
	if o := st.LastOutcome; o != nil {
		lines[4] = fmt.Sprintf("last outcome: %s of %s (%s)", o.Result, o.Worker, label(o.Token))
	}
	// The contract fixes Crashed only in state CRASHED: Redis reports the
	// uncounted evidence of a quarantined job too.
	if st.State == leasestore.StateCrashed {
		lines[5] = "crashed: " + ls.describeCrash(st.Crashed, label)
	}
	events := make([]string, len(st.History))
	for i, e := range st.History {
		events[i] = fmt.Sprintf("%s %s %s", e.Kind, e.Worker, label(e.Token))
	}
	lines = append(lines, ls.describeSlots(st, label)...)
	return append(lines, "history: "+strings.Join(events, ", "))
}

// describeRoundTrip says whether rtt, a holder's last round trip as a
// status shows it, is one the holder of the run with the model's token
// reported. The contract fixes no more: etcd writes a round trip only when
// it moved by more than its slack, and from the renewal after the one that
// reported it (docs/etcd.md, Renewal round trips). RenewKeepsTheRoundTrip
// checks the exact figure; this still catches a round trip of another run,
// which a new grant must not show.
func (ls *lockstep) describeRoundTrip(rtt time.Duration, token int64) string {
	if rtt == 0 || slices.Contains(ls.roundTrips[token], rtt) {
		return "no round trip, or one its holder reported"
	}
	return fmt.Sprintf("round trip %s, which its holder never reported", rtt)
}

// compareViews fails the test when the store-wide views, Leases, Counts,
// Quarantined and Overdue, do not show what the model's records say.
func (ls *lockstep) compareViews(t *testing.T) {
	t.Helper()
	leases, err := ls.operator.Leases(Ctx(t))
	if err != nil {
		ls.fail(t, "leases", err, "no error")
	}
	quarantined, err := ls.operator.Quarantined(Ctx(t))
	if err != nil {
		ls.fail(t, "quarantined", err, "no error")
	}
	counts, err := ls.operator.Counts(Ctx(t))
	if err != nil {
		ls.fail(t, "counts", err, "no error")
	}
	var got []string
	for _, h := range leases {
		got = append(got, fmt.Sprintf("lease of %s by %s (%s)", h.Job, h.Worker, ls.storeLabel(h.Token)))
	}
	for _, q := range quarantined {
		got = append(got, fmt.Sprintf("%s quarantined by %s after %d crashes", q.Job, q.By, q.Crashes))
	}
	got = append(got, fmt.Sprintf("%d in flight, %d quarantined", counts.InFlight, counts.Quarantined))

	var want, quarantines []string
	var inFlight int
	for _, job := range modelJobs {
		r := &ls.model[job].rec
		for _, u := range r.LiveRuns(ls.now) {
			want = append(want, fmt.Sprintf("lease of %s by %s (%s)", job, u.Holder, ls.label(u.Token)))
		}
		if r.Live(ls.now) {
			inFlight++
		}
		if q := r.Quarantine; q != nil {
			quarantines = append(quarantines, fmt.Sprintf("%s quarantined by %s after %d crashes", job, q.By, q.Crashes))
		}
	}
	want = append(append(want, quarantines...), fmt.Sprintf("%d in flight, %d quarantined", inFlight, len(quarantines)))
	if !slices.Equal(got, want) {
		ls.fail(t, "the store-wide views", strings.Join(got, "; "), strings.Join(want, "; "))
	}
	ls.compareOverdue(t)
}
