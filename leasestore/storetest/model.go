package storetest

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// modelSeed replays a failed sequence: a failure names its seed.
var modelSeed = flag.Int64("storetest.seed", 0, "seed of the model-based conformance test FollowsTheRules (0: a new one each run)")

// Size of the sequence. Each step is a few round trips; each vanished
// supervisor waits for a lease to expire (etcd's shortest lease is two
// seconds, and etcd checks expiries twice a second), so there are few of
// them, and with -short fewer still.
const (
	modelSteps      = 300
	modelShortSteps = 100
	modelVanishes   = 6
	// modelForgets is how many of the vanished supervisors' runs let their
	// evidence expire too: the longest wait of all, twice the short TTL.
	modelForgets = 1
	// modelTick is how far the model's clock moves at each step: the
	// events of two steps never share a time.
	modelTick = time.Millisecond
	// modelViewsEvery is how often, in steps, the store-wide views are
	// compared.
	modelViewsEvery = 4
	// modelWorkers is how many workers ask for the jobs, each through a
	// client of its own, with a fresh holder ID for each run.
	modelWorkers = 3
)

// modelJobs are the jobs of the sequence.
var modelJobs = []string{"alpha", "beta"}

// modelBudget is how long a sequence may run: every lease it took is then
// younger than LongTTL/2, so none expires in the store on its own before
// the model's clock says so.
const modelBudget = LongTTL / 2

// testFollowsTheRules is FollowsTheRules, a model-based test: it runs a
// random sequence of operations, by several workers on a couple of jobs,
// against the store and against the pure rules of package rules on a model
// record per job, and compares every answer, every job's status after each
// step, and the store-wide views (Leases, Counts, Quarantined) every few
// steps. The hand-written rules of the suite check each rule in its own
// setting; this test checks that a store whose transitions are scripts of
// their own (Redis's Lua, PostgreSQL's plpgsql) takes the same decisions as
// the rules in the settings nobody thought of.
//
// Time. A store keeps its own clock (Redis TIME, PostgreSQL's
// clock_timestamp(), the host's clock for the embedded store and etcd),
// which the test cannot move; the model's clock is kept in step by
// construction. Every lease the sequence takes lives for LongTTL, with
// evidence for EvidenceTTL, and the sequence stops well before that, so
// nothing expires on its own. Only the steps of vanished supervisors take
// a lease (and once its evidence) that expires: each waits until the store
// reports it expired, then moves the model's clock past it. Minimum
// intervals and deadlines are an hour away from every time the test sees,
// so the two clocks' small difference cannot change an answer.
func testFollowsTheRules(t *testing.T, h fixture) {
	seed := *modelSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	replay := fmt.Sprintf("go test -run '^%s$' <the store's package> -storetest.seed=%d", strings.ReplaceAll(t.Name(), "/", "$/^"), seed)
	t.Logf("seed %d; replay with: %s", seed, replay)
	ls := newLockstep(t, h, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d; replay with: %s\nthe sequence:\n%s", seed, replay, strings.Join(ls.trail, "\n"))
		}
	})
	steps, vanishes, forgets := modelSteps, modelVanishes, modelForgets
	if testing.Short() {
		steps, vanishes, forgets = modelShortSteps, modelVanishes/3, 0
	}
	if h.shortTTL() >= time.Second {
		vanishes = max(1, vanishes/2)
	}
	ls.vanishes, ls.forgets = vanishes, forgets
	start := time.Now()
	for ls.step = 1; ls.step <= steps; ls.step++ {
		if time.Since(start) > modelBudget {
			t.Logf("stopped after %d of %d steps: the sequence may run %s, so that no lease expires on its own", ls.step-1, steps, modelBudget)
			break
		}
		ls.now = ls.now.Add(modelTick)
		ls.pick()(t)
		for _, job := range modelJobs {
			ls.compareStatus(t, job)
		}
		// The views read every job, where a step changes one or two.
		if ls.step%modelViewsEvery == 0 {
			ls.compareViews(t)
		}
	}
	t.Logf("%d steps, %d grants, %d vanished supervisors (%d never found) in %s", ls.step-1, len(ls.labels),
		vanishes-ls.vanishes+forgets-ls.forgets, forgets-ls.forgets, time.Since(start).Round(time.Millisecond))
	seen := make([]string, 0, len(ls.seen))
	for what, n := range ls.seen {
		seen = append(seen, fmt.Sprintf("%4d  %s", n, what))
	}
	slices.Sort(seen)
	t.Logf("answers:\n%s", strings.Join(seen, "\n"))
}

// lockstep is the store under test and its model, run in lockstep.
type lockstep struct {
	h   fixture
	rnd *rand.Rand
	// operator is the client of the reaper and the on-call commands;
	// workers[i] is worker i's.
	operator *leasestore.Store
	workers  []*leasestore.Store
	// now is the model's clock.
	now   time.Time
	model map[string]*modelJob
	// runs are the grants of the sequence, by job, oldest first.
	runs map[string][]*modelRun
	// gaveUp are the holders that gave up on a grant, by job.
	gaveUp map[string][]string
	// maxSlots is the most slots the store grants a job
	// (leasestore.Limits.MaxSlots): the sequence has runs of several slots
	// and waiters (modelqueue.go).
	maxSlots int
	// waiters are the requests that wait in each job's queue.
	waiters map[string][]modelWaiter
	// tokens maps the store's tokens to the model's: their values differ
	// (a token is max(last+1, the store's clock in µs)), so they are
	// compared only for naming the same run. labels names the model's
	// tokens by grant, g1, g2..., for the messages.
	tokens map[int64]int64
	labels map[int64]string
	// roundTrips are the round trips each run's holder reported with a
	// renewal that passed, by the model's token.
	roundTrips map[int64][]time.Duration
	// holders counts the holder IDs handed out, one per run.
	holders int
	// vanishes and forgets are how many vanished supervisors the sequence
	// may still have, whose crash is found, and whose evidence expires
	// first.
	vanishes, forgets int
	step              int
	trail             []string
	// seen counts the answers the sequence got, by operation, to show in
	// the log what it went through.
	seen map[string]int
	// sinces are the jobs' expectations' since as last compared
	// (modelexpect.go).
	sinces map[string]expectSince
}

// modelJob is one job as the rules see it: its record and its history.
type modelJob struct {
	rec     rules.Record
	history []leasestore.Event
}

// apply appends step's events to the job's history, of which the newest
// HistoryLimit are kept, as every store does.
func (m *modelJob) apply(step rules.Step) {
	m.history = append(m.history, step.Events...)
	if n := len(m.history) - leasestore.HistoryLimit; n > 0 {
		m.history = slices.Delete(m.history, 0, n)
	}
}

// modelRun is a grant of the sequence: the lease the store gave and the
// one the rules gave.
type modelRun struct {
	worker       int
	req          leasestore.AcquireRequest
	store, model *leasestore.Lease
}

// newLockstep opens the clients of the sequence on h's store and makes the
// model of its jobs, which the store has never seen.
func newLockstep(t *testing.T, h fixture, seed int64) *lockstep {
	ls := &lockstep{
		h: h, rnd: rand.New(rand.NewPCG(uint64(seed), 0)),
		operator: client(t, h.Fixture),
		now:      time.Now().Truncate(time.Microsecond),
		model:    map[string]*modelJob{}, runs: map[string][]*modelRun{}, gaveUp: map[string][]string{}, waiters: map[string][]modelWaiter{},
		tokens: map[int64]int64{}, labels: map[int64]string{}, roundTrips: map[int64][]time.Duration{}, seen: map[string]int{},
		sinces: map[string]expectSince{},
	}
	for range modelWorkers {
		ls.workers = append(ls.workers, client(t, h.Fixture))
	}
	for _, job := range modelJobs {
		ls.model[job] = &modelJob{rec: rules.Record{Job: job}}
	}
	ls.maxSlots = ls.operator.Limits().Slots()
	return ls
}

// logf adds a line to the trail printed when the test fails.
func (ls *lockstep) logf(format string, args ...any) {
	ls.trail = append(ls.trail, fmt.Sprintf("%3d  ", ls.step)+fmt.Sprintf(format, args...))
}

// fail stops the test at a divergence between the store and the rules.
func (ls *lockstep) fail(t *testing.T, what string, store, model any) {
	t.Helper()
	ls.logf("  DIVERGES: %s", what)
	t.Fatalf("step %d: %s:\n  the store: %v\n  the rules: %v", ls.step, what, store, model)
}

// label names the model's token by its grant (g1, g2...); "-" for none.
func (ls *lockstep) label(token int64) string {
	if token == 0 {
		return "-"
	}
	if l, ok := ls.labels[token]; ok {
		return l
	}
	return fmt.Sprintf("token %d, never granted", token)
}

// storeLabel names the store's token by the grant of the model it is
// mapped to.
func (ls *lockstep) storeLabel(token int64) string {
	if token == 0 {
		return "-"
	}
	if m, ok := ls.tokens[token]; ok {
		return ls.label(m)
	}
	return fmt.Sprintf("store token %d, never granted", token)
}

// grant records that the store's token and the model's name the same run,
// and fails the test when either was granted for another run before.
func (ls *lockstep) grant(t *testing.T, storeToken, modelToken int64) {
	t.Helper()
	m, seen := ls.tokens[storeToken]
	_, modelSeen := ls.labels[modelToken]
	switch {
	case seen && m != modelToken:
		ls.fail(t, "the grant's token names another run", ls.storeLabel(storeToken), ls.label(modelToken))
	case !seen && modelSeen:
		ls.fail(t, "the grant is a new run where the rules give an earlier run's lease back",
			fmt.Sprintf("new token %d", storeToken), ls.label(modelToken))
	case !seen:
		ls.tokens[storeToken] = modelToken
		ls.labels[modelToken] = fmt.Sprintf("g%d", len(ls.labels)+1)
	}
}
