package storetest

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The operations of the model-based test: each does one store call and the
// rule it must follow, and compares the answers; the statuses are compared
// after every step (modelcheck.go).

// modelResults are the outcomes a run can end with.
var modelResults = []leasestore.Result{
	leasestore.ResultCompleted, leasestore.ResultFailed, leasestore.ResultCrashed, leasestore.ResultNotStarted,
}

// outcome is a typical outcome of a random result, whose duration says
// which step it is of: no two outcomes of the sequence are the same. A
// registry answers a release repeated with the same lease and outcome with
// the first answer (docs/semantics.md, The remote store: a retry after a
// lost answer), where the rules, which cannot tell a retry, refuse it.
func (ls *lockstep) outcome() leasestore.Outcome {
	out := Outcome(modelResults[ls.rnd.IntN(len(modelResults))])
	out.Duration += time.Duration(ls.step) * time.Millisecond
	return out
}

// pick chooses the next step, on a job chosen at random, among those that
// make sense in the model's state: a renewal needs a run to renew, a
// vanished supervisor a free job.
func (ls *lockstep) pick() func(t *testing.T) {
	job := modelJobs[ls.rnd.IntN(len(modelJobs))]
	m := ls.model[job]
	type choice struct {
		weight int
		run    func(t *testing.T, job string)
	}
	// A held job is mostly released, a free one mostly asked for.
	acquire, release, unquarantine := 8, 2, 1
	if m.rec.Live(ls.now) {
		acquire, release = 3, 6
	}
	if m.rec.Quarantine != nil {
		unquarantine = 4
	}
	choices := []choice{{acquire, ls.acquireFresh}, {2, ls.scan}, {1, ls.quarantine}, {unquarantine, ls.releaseQuarantine}, {2, ls.checkToken},
		{1, ls.expect}}
	if len(ls.runs[job]) > 0 {
		choices = append(choices, choice{2, ls.acquireAgain}, choice{3, ls.renew}, choice{release, ls.release}, choice{4, ls.recordLate})
	}
	choices = append(choices, choice{1, ls.giveUpBeforeTheGrant})
	if len(ls.gaveUp[job]) > 0 {
		choices = append(choices, choice{1, ls.acquireGaveUp})
	}
	if len(ls.waiters[job]) > 0 {
		choices = append(choices, choice{4, ls.acquireWaiting}, choice{1, ls.leave})
	}
	if len(m.rec.LiveRuns(ls.now)) < ls.slotsOf(job) && m.rec.Quarantine == nil {
		if ls.vanishes > 0 {
			choices = append(choices, choice{3, ls.vanish})
		}
		// The run's evidence is seen to expire in its job's status, which
		// shows a crashed run only while no other run of the job is live.
		if ls.forgets > 0 && !m.rec.Live(ls.now) {
			choices = append(choices, choice{1, ls.forget})
		}
	}
	var weighted []func(t *testing.T, job string)
	for _, c := range choices {
		for range c.weight {
			weighted = append(weighted, c.run)
		}
	}
	run := weighted[ls.rnd.IntN(len(weighted))]
	return func(t *testing.T) { run(t, job) }
}

// freshHolder is a holder ID for a new run of a random worker.
func (ls *lockstep) freshHolder() (worker int, holder string) {
	worker = ls.rnd.IntN(modelWorkers)
	ls.holders++
	return worker, fmt.Sprintf("w%d#%d", worker, ls.holders)
}

// someRun is the job's last run most of the time, else an earlier one.
func (ls *lockstep) someRun(job string) *modelRun {
	runs := ls.runs[job]
	if ls.rnd.IntN(4) > 0 {
		return runs[len(runs)-1]
	}
	return runs[ls.rnd.IntN(len(runs))]
}

// acquireFresh is a new run asking for the job, with what a supervisor may
// ask besides: a threshold of 2 or 3 crashes, and at times a minimum
// interval, a deadline, a region or an expectation.
func (ls *lockstep) acquireFresh(t *testing.T, job string) {
	worker, holder := ls.freshHolder()
	req := Request(job, holder, LongTTL)
	req.MaxCrashes = 2 + ls.rnd.IntN(2)
	ls.slotted(&req, true)
	if ls.rnd.IntN(6) == 0 {
		req.MinInterval = time.Hour
	}
	if ls.rnd.IntN(4) == 0 {
		req.Expect = ls.someExpectation()
	}
	// An hour from the store's clock either way: no clock skew
	// decides it.
	switch ls.rnd.IntN(8) {
	case 0:
		req.Deadline = time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	case 1:
		req.Deadline = time.Now().Add(time.Hour).Truncate(time.Millisecond)
	}
	switch ls.rnd.IntN(10) {
	case 0:
		req.Region = "eu-west-1"
	case 1:
		req.Region = "us-east-1"
	}
	ls.acquire(t, worker, req)
}

// acquireAgain is the holder of a run asking again, as one whose answer
// was lost does: the live holder gets its lease back; a holder whose lease
// expired asks anew. It asks for LongTTL and the usual evidence TTL even
// when its run vanished: only the steps of vanished supervisors take a
// lease, or evidence, that expires.
func (ls *lockstep) acquireAgain(t *testing.T, job string) {
	run := ls.someRun(job)
	req := run.req
	req.TTL, req.EvidenceTTL = LongTTL, EvidenceTTL
	ls.acquire(t, run.worker, req)
}

// acquireGaveUp is the request of a holder that gave up on it arriving
// late.
func (ls *lockstep) acquireGaveUp(t *testing.T, job string) {
	holders := ls.gaveUp[job]
	req := Request(job, holders[ls.rnd.IntN(len(holders))], LongTTL)
	req.Slots = ls.slotsOf(job)
	ls.acquire(t, ls.rnd.IntN(modelWorkers), req)
}

// acquire asks for req through worker's client and by the rules, compares
// the answers, and returns the run both granted, nil when both refused.
func (ls *lockstep) acquire(t *testing.T, worker int, req leasestore.AcquireRequest) *modelRun {
	t.Helper()
	ls.logf("%s: %s asks (%s)", req.Job, req.Holder, describeRequest(req))
	sl, serr := ls.workers[worker].Acquire(Ctx(t), req)
	m := ls.model[req.Job]
	step, ml, merr := rules.Acquire(&m.rec, req, ls.now)
	m.apply(step)
	ls.firstHolder(req.Job, serr, merr)
	ls.compareAnswers(t, "acquire", serr, merr)
	ls.noteWaiter(worker, req, merr)
	if ml == nil {
		return nil
	}
	ls.grant(t, sl.Token, ml.Token)
	if sl.Attempt != ml.Attempt {
		ls.fail(t, "the grant's attempt", sl.Attempt, ml.Attempt)
	}
	if got, want := ls.describeCrash(sl.Recovered, ls.storeLabel), ls.describeCrash(ml.Recovered, ls.label); got != want {
		ls.fail(t, "the crash the grant counted", got, want)
	}
	ls.logf("  → granted %s, attempt %d, recovered %s", ls.label(ml.Token), ml.Attempt, ls.describeCrash(ml.Recovered, ls.label))
	for _, run := range ls.runs[req.Job] {
		if run.model.Token == ml.Token {
			return run // the same run, asking again
		}
	}
	run := &modelRun{worker: worker, req: req, store: sl, model: ml}
	ls.runs[req.Job] = append(ls.runs[req.Job], run)
	return run
}

// describeRequest says what an acquire request asks besides the lease.
func describeRequest(req leasestore.AcquireRequest) string {
	s := fmt.Sprintf("ttl %s, max crashes %d", req.TTL, req.MaxCrashes)
	if req.MinInterval > 0 {
		s += fmt.Sprintf(", min interval %s", req.MinInterval)
	}
	switch {
	case req.Deadline.IsZero():
	case req.Deadline.Before(time.Now()):
		s += ", deadline an hour ago"
	default:
		s += ", deadline in an hour"
	}
	if req.Region != "" {
		s += ", region " + req.Region
	}
	if req.Expect != nil {
		s += ", " + describeExpect(req.Expect)
	}
	if req.Slots > 1 {
		s += fmt.Sprintf(", %d slots", req.Slots)
	}
	if req.Wait {
		s += ", waits"
	}
	return s
}

// vanish is a run whose supervisor vanishes: it takes the lease with the
// store's short TTL and never renews it. The step waits until the store
// reports the lease expired, then moves the model's clock past the run's
// liveness.
func (ls *lockstep) vanish(t *testing.T, job string) {
	worker, holder := ls.freshHolder()
	req := Request(job, holder, ls.h.shortTTL())
	req.MaxCrashes = 2 + ls.rnd.IntN(2)
	req.Slots = ls.slotsOf(job)
	ls.logf("%s: the supervisor of %s will vanish", job, holder)
	run := ls.acquire(t, worker, req)
	if run == nil {
		return
	}
	ls.vanishes--
	ls.h.awaitExpired(t, ls.operator, run.store)
	ls.now = ls.now.Add(req.TTL + modelTick)
	ls.logf("  its lease expired in the store; the model's clock moves %s on", req.TTL+modelTick)
}

// forget is a run whose supervisor vanished while nobody looked: its lease
// and then its crash evidence expire, and its crash is never counted (as
// an expired Redis key is not). The step waits until the store no longer
// reports the run, then moves the model's clock past its evidence.
func (ls *lockstep) forget(t *testing.T, job string) {
	worker, holder := ls.freshHolder()
	req := Request(job, holder, ls.h.shortTTL())
	req.EvidenceTTL = 2 * req.TTL
	req.MaxCrashes = 2 + ls.rnd.IntN(2)
	req.Slots = ls.slotsOf(job)
	ls.logf("%s: the supervisor of %s will vanish, and nobody looks until its evidence expired", job, holder)
	granted := ls.now
	run := ls.acquire(t, worker, req)
	if run == nil {
		return
	}
	ls.forgets--
	ls.h.awaitEvidenceExpired(t, ls.operator, run.store, req.EvidenceTTL)
	ls.now = granted.Add(req.EvidenceTTL + modelTick)
	ls.logf("  its evidence expired in the store; the model's clock moves past it")
}

// awaitEvidenceExpired waits until the store no longer reports l's run,
// neither live nor crashed: its evidence, of evidenceTTL, expired.
func (h fixture) awaitEvidenceExpired(t *testing.T, s Client, l *leasestore.Lease, evidenceTTL time.Duration) {
	t.Helper()
	h.awaitExpired(t, s, l)
	time.Sleep(min(max(time.Until(l.GrantedAt.Add(evidenceTTL)), 0), evidenceTTL))
	for guard := time.Now().Add(h.expiryGuard()); ; time.Sleep(10 * time.Millisecond) {
		st := Status(t, s, l.Job)
		if st.Crashed == nil || st.Crashed.Token != l.Token {
			return
		}
		if time.Now().After(guard) {
			t.Fatalf("evidence of %s (token %d, evidence TTL %s) still there after %s", l.Job, l.Token, evidenceTTL, h.expiryGuard())
		}
	}
}

// renew renews a run's lease, reporting a round trip; one time in eight,
// under another holder's name, as a confused client would.
func (ls *lockstep) renew(t *testing.T, job string) {
	run := ls.someRun(job)
	rtt := time.Duration(1+ls.rnd.IntN(50)) * time.Millisecond
	sl, ml := *run.store, *run.model
	sl.RTT, ml.RTT = rtt, rtt
	if ls.rnd.IntN(8) == 0 {
		_, sl.Holder = ls.freshHolder()
		ml.Holder = sl.Holder
	}
	ls.logf("%s: %s renews %s (round trip %s)", job, sl.Holder, ls.label(ml.Token), rtt)
	serr := ls.workers[run.worker].Renew(Ctx(t), &sl)
	m := ls.model[job]
	step, merr := rules.Renew(&m.rec, &ml, ls.now)
	m.apply(step)
	ls.compareAnswers(t, "renew", serr, merr)
	if merr == nil {
		ls.roundTrips[ml.Token] = append(ls.roundTrips[ml.Token], rtt)
	}
}

// release ends a run with a random outcome.
func (ls *lockstep) release(t *testing.T, job string) {
	run := ls.someRun(job)
	out := ls.outcome()
	ls.logf("%s: %s releases %s: %s", job, run.req.Holder, ls.label(run.model.Token), out.Result)
	serr := ls.workers[run.worker].Release(Ctx(t), run.store, out)
	m := ls.model[job]
	step, merr := rules.Release(&m.rec, run.model, out, ls.now)
	m.apply(step)
	ls.compareAnswers(t, "release", serr, merr)
}

// recordLate delivers the late outcome of one of the job's runs, most of
// the time one whose crash was counted and whose outcome did not come yet
// (the late outcomes that withdraw crashes and lift quarantines): with its
// token, or, a quarter of the time, with Token 0, its holder having given
// up on the grant.
func (ls *lockstep) recordLate(t *testing.T, job string) {
	run := ls.someRun(job)
	if crashed := ls.crashedRuns(job); len(crashed) > 0 && ls.rnd.IntN(3) > 0 {
		run = crashed[ls.rnd.IntN(len(crashed))]
	}
	if ls.rnd.IntN(4) == 0 {
		ls.deliverLate(t, run.worker, leasestore.LateOutcome{Job: job, Holder: run.req.Holder,
			Outcome: ls.outcome()}, 0)
		return
	}
	ls.deliverLate(t, run.worker, leasestore.LateOutcome{Job: job, Holder: run.req.Holder, Token: run.store.Token,
		Outcome: ls.outcome()}, run.model.Token)
}

// crashedRuns are the job's runs whose crash the model's history shows
// counted, and no late outcome of theirs yet.
func (ls *lockstep) crashedRuns(job string) []*modelRun {
	history := ls.model[job].history
	var crashed []*modelRun
	for _, run := range ls.runs[job] {
		if hasEvent(history, leasestore.EventCrashed, run.model.Token) && !hasEvent(history, leasestore.EventLateOutcome, run.model.Token) {
			crashed = append(crashed, run)
		}
	}
	return crashed
}

// giveUpBeforeTheGrant is a holder giving up on its request before the
// grant arrived (RecordLate with Token 0): its request may still arrive
// (acquireGaveUp).
func (ls *lockstep) giveUpBeforeTheGrant(t *testing.T, job string) {
	worker, holder := ls.freshHolder()
	ls.deliverLate(t, worker, leasestore.LateOutcome{Job: job, Holder: holder, Outcome: Outcome(leasestore.ResultNotStarted)}, 0)
}

// deliverLate delivers late through worker's client, with the store's
// token, and to the rules with the model's, and compares the corrections.
func (ls *lockstep) deliverLate(t *testing.T, worker int, late leasestore.LateOutcome, modelToken int64) {
	ls.logf("%s: late outcome of %s, %s: %s", late.Job, late.Holder, ls.label(modelToken), late.Result)
	if late.Token == 0 {
		ls.gaveUp[late.Job] = append(ls.gaveUp[late.Job], late.Holder)
	}
	sc, err := ls.workers[worker].RecordLate(Ctx(t), late)
	if err != nil {
		ls.fail(t, "record late", err, "no error")
	}
	m := ls.model[late.Job]
	ml := late
	ml.Token = modelToken
	step, mc := rules.RecordLate(&m.rec, m.history, ml, ls.now)
	m.apply(step)
	if sc != mc {
		ls.fail(t, "the correction of a late outcome", describeCorrection(sc), describeCorrection(mc))
	}
	ls.logf("  → %s", describeCorrection(mc))
	ls.seen["record late: "+mc.String()]++
}

// scan is the reaper's pass over every job.
func (ls *lockstep) scan(t *testing.T, _ string) {
	ls.logf("scan")
	found, err := ls.operator.Scan(Ctx(t))
	if err != nil {
		ls.fail(t, "scan", err, "no error")
	}
	got := map[string][]string{}
	for _, c := range found {
		got[c.Job] = append(got[c.Job], ls.describeCrash(&c, ls.storeLabel))
	}
	want := map[string][]string{}
	for _, job := range modelJobs {
		m := ls.model[job]
		step, crashes := rules.Reap(&m.rec, ls.now)
		m.apply(step)
		for _, c := range crashes {
			want[job] = append(want[job], ls.describeCrash(&c, ls.label))
		}
	}
	for _, m := range []map[string][]string{got, want} {
		for _, crashes := range m {
			sort.Strings(crashes)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		ls.fail(t, "the crashes scan counted", got, want)
	}
	ls.logf("  → %v", want)
	ls.seen[fmt.Sprintf("scan: %d crashes", len(want))]++
}

// quarantine is an operator's quarantine of the job.
func (ls *lockstep) quarantine(t *testing.T, job string) {
	note := leasestore.Note{By: "alice", Reason: fmt.Sprintf("step %d", ls.step)}
	ls.logf("%s: quarantined by %s", job, note.By)
	if err := ls.operator.Quarantine(Ctx(t), job, note); err != nil {
		ls.fail(t, "quarantine", err, "no error")
	}
	m := ls.model[job]
	m.apply(rules.Quarantine(&m.rec, note, ls.now))
}

// releaseQuarantine is an operator's release of the job from quarantine.
func (ls *lockstep) releaseQuarantine(t *testing.T, job string) {
	note := leasestore.Note{By: "bob", Reason: fmt.Sprintf("step %d", ls.step)}
	ls.logf("%s: released from quarantine by %s", job, note.By)
	serr := ls.operator.ReleaseQuarantine(Ctx(t), job, note)
	m := ls.model[job]
	step, merr := rules.ReleaseQuarantine(&m.rec, note, ls.now)
	m.apply(step)
	ls.compareAnswers(t, "release from quarantine", serr, merr)
}

// checkToken checks the token of one of the job's runs, or one above the
// last, never granted.
func (ls *lockstep) checkToken(t *testing.T, job string) {
	var storeToken, modelToken int64 = 1, 1
	if runs := ls.runs[job]; len(runs) > 0 {
		run := ls.someRun(job)
		storeToken, modelToken = run.store.Token, run.model.Token
		if ls.rnd.IntN(5) == 0 {
			last := runs[len(runs)-1]
			storeToken, modelToken = last.store.Token+1, last.model.Token+1
		}
	}
	ls.logf("%s: check token %s", job, ls.label(modelToken))
	serr := ls.operator.CheckToken(Ctx(t), job, storeToken)
	merr := rules.CheckToken(&ls.model[job].rec, modelToken, ls.now)
	ls.compareAnswers(t, "check token", serr, merr)
}
