package pgstore

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A mutant is the store broken on purpose against one rule of the
// conformance suite: one change to one function. TestMutantsAreCaught runs
// the rule's subtest against each, and that subtest must fail: a suite
// that passes a broken store proves nothing.
type mutant struct {
	rule     string // the storetest subtest that must catch it
	template *string
	old, new string // the change, which must apply exactly once
}

var mutants = map[string]mutant{
	"grant-while-held":   {"MutualExclusion", &acquireSQL, "IF v_slots - v_live <= v_ahead THEN", "IF v_slots - v_live < v_ahead THEN"},
	"renew-after-expiry": {"Renew", &renewSQL, "IF r.live_until <= v_now THEN", "IF false THEN"},
	"renew-keeps-evidence-expiry": {"RenewExtendsEvidence", &renewSQL,
		" evidence_until = v_now + r.evidence_ttl,\n", "\n"},
	"release-any-token": {"ReleaseWithStaleTokenChangesNothing", &releaseSQL,
		"WHERE job = p_job AND token = p_token;", "WHERE job = p_job;"},
	"completed-keeps-crashes": {"ReleaseOutcomes", &releaseSQL,
		"crashes = CASE WHEN v_completed THEN 0 ELSE crashes END", "crashes = crashes"},
	"tokens-without-the-clock": {"TokensStrictlyIncrease", &acquireSQL,
		"greatest(j.last_token + 1, @schema@._us(v_now))", "j.last_token + 1"},
	"no-regrant": {"AcquireIdempotentForTheHolder", &acquireSQL, "IF v_mine IS NOT NULL THEN", "IF false THEN"},
	"crash-kept-after-counting": {"CrashCountedOnce", &libSQL,
		"DELETE FROM @schema@.runs r\n", "UPDATE @schema@.runs r SET job = r.job\n"},
	"quarantine-one-late": {"QuarantineAtRunThreshold", &libSQL,
		"j.crashes + row_number() OVER w >= g.max_crashes", "j.crashes + row_number() OVER w > g.max_crashes"},
	"quarantine-since-moves": {"ManualQuarantine", &quarantineSQL,
		"q_since = coalesce(j.q_since, v_now)", "q_since = v_now"},
	"no-min-interval": {"MinInterval", &acquireSQL, "IF p_min_interval_us > 0 AND", "IF false AND"},
	"acquired-names-host-and-pid": {"HistoryDetails", &acquireSQL,
		"'attempt ' || (j.attempts + 1)", "format('attempt %s on %s pid %s', j.attempts + 1, p_host, p_pid)"},
	"crash-names-its-expiry": {"HistoryDetails", &libSQL,
		"'supervisor vanished: liveness expired, found by ' || p_by",
		"format('supervisor vanished: liveness expired at %s, found by %s', c.live_until, p_by)"},
	"region-not-compared": {"Region", &acquireSQL,
		"IF p_region <> '' AND j.region IS NOT NULL AND j.region <> p_region THEN", "IF false THEN"},
	"region-not-recorded": {"Region", &acquireSQL,
		"region = coalesce(j.region, nullif(p_region, ''))", "region = j.region"},
	"deadline-not-compared": {"Deadline", &acquireSQL, "IF p_deadline_us <> 0 AND", "IF false AND"},
	"deadline-before-the-crash-count": {"Deadline", &acquireSQL,
		"\n  IF j.q_since IS NOT NULL THEN",
		"\n  IF p_deadline_us <> 0 AND @schema@._us(v_now) > p_deadline_us THEN\n" +
			"    RETURN json_build_object('k', 'deadline', 'now', @schema@._us(v_now));\n  END IF;\n  IF j.q_since IS NOT NULL THEN"},
	"renew-drops-the-round-trip": {"RenewKeepsTheRoundTrip", &renewSQL,
		"rtt_us = CASE WHEN p_rtt_us > 0 THEN p_rtt_us ELSE r.rtt_us END", "rtt_us = r.rtt_us"},
	"leases-without-round-trips": {"RenewKeepsTheRoundTrip", &leasesSQL, "'rtt_us', r.rtt_us,", "'rtt_us', 0,"},
	"history-one-too-many": {"HistoryBounded", &releaseSQL,
		"seq <= j.events + 1 - @history@", "seq <= j.events - @history@"},
	"leases-lists-expired": {"StatusLeasesCounts", &leasesSQL, "WHERE r.live_until > c.now", ""},
	"evidence-counts-as-live": {"CheckToken", &checkTokenSQL,
		"r.token = p_token AND r.live_until > c.now", "r.token = p_token AND r.evidence_until > c.now"},
	"release-without-notify": {"Subscribe", &releaseSQL,
		"  PERFORM pg_notify(@schema@._channel(p_job), '');\n", ""},
	"grant-not-published":   {"TokenFeed", &acquireSQL, "  PERFORM @schema@._publish_token('g', v_token, p_job);\n", ""},
	"release-not-published": {"TokenFeed", &releaseSQL, "  PERFORM @schema@._publish_token('e', r.token, p_job);\n", ""},
	"crash-not-published":   {"TokenFeed", &libSQL, ", @schema@._publish_token('e', c.token, c.job)", ""},
	"ends-published-as-grants": {"TokenFeed", &libSQL,
		"pg_notify('leasectl_tokens_' || md5(@ns@), p_kind ||", "pg_notify('leasectl_tokens_' || md5(@ns@), 'g' ||"},
	"late-not-released": {"RecordLateReleasesARunStillThere", &recordLateSQL,
		"ORDER BY slot LIMIT 1;\n  IF FOUND THEN", "ORDER BY slot LIMIT 1;\n  IF false THEN"},
	"late-crash-not-withdrawn": {"RecordLateWithdrawsACountedCrash", &recordLateSQL,
		"IF v_crashed IS NOT NULL AND NOT EXISTS", "IF false AND NOT EXISTS"},
	"late-withdrawn-twice": {"RecordLateWithdrawsACountedCrash", &recordLateSQL,
		"v_recorded := v_recorded OR EXISTS", "v_recorded := v_recorded AND EXISTS"},
	"late-withdraws-after-a-completed-run": {"RecordLateWithdrawsACountedCrash", &recordLateSQL,
		"(x.kind = 'released' AND x.result = 'completed')", "false"},
	"late-quarantine-kept": {"RecordLateLiftsTheQuarantineItCaused", &recordLateSQL,
		"IF v_withdrawn AND j.q_since IS NOT NULL", "IF false AND j.q_since IS NOT NULL"},
	"late-lifts-operators-quarantine": {"RecordLateLiftsTheQuarantineItCaused", &recordLateSQL,
		" AND j.q_by = 'leasectl'", ""},
	"late-lift-without-notify": {"RecordLateLiftsTheQuarantineItCaused", &recordLateSQL,
		"    PERFORM pg_notify(@schema@._channel(p_job), '');\n", ""},
	"late-completion-counts-as-a-failure": {"RecordLateCompletedEndsTheStreak", &recordLateSQL,
		"IF p_result = 'completed' THEN", "IF false THEN"},
	"late-forgets-who-gave-up": {"RecordLateAbandonedGrant", &recordLateSQL,
		"    UPDATE @schema@.jobs SET gave_up = p_holder WHERE job = p_job;\n", ""},
	"acquire-ignores-who-gave-up": {"RecordLateAbandonedGrant", &acquireSQL,
		"IF j.gave_up = p_holder THEN", "IF false THEN"},
	"slot-not-the-lowest-free": {"Slots", &acquireSQL,
		"SELECT min(s) INTO v_slot FROM generate_series(0, v_live) s", "SELECT max(s) INTO v_slot FROM generate_series(0, v_live + 1) s"},
	"token-of-the-last-grant-only": {"Slots", &checkTokenSQL,
		"AND (p_token = j.last_token OR j.slots > 1)", "AND p_token = j.last_token"},
	"stop-the-first-slot-only": {"StopEverySlot", &stopSQL,
		"WHERE job = p_job AND live_until > v_now\n", "WHERE job = p_job AND live_until > v_now AND slot = 0\n"},
	"slots-not-compared": {"SlotsMustAgree", &acquireSQL, "IF v_live > 0 AND v_slots <> j.slots THEN", "IF false THEN"},
	"grant-out-of-fifo-order": {"QueueOrder", &acquireSQL,
		"IF v_slots - v_live <= v_ahead THEN", "IF v_slots - v_live <= 0 THEN"},
	"grant-out-of-fifo-order-in-the-model": {"FollowsTheRules", &acquireSQL,
		"IF v_slots - v_live <= v_ahead THEN", "IF v_slots - v_live <= 0 THEN"},
	"waiter-never-lapses": {"WaiterVanishesMidQueue", &acquireSQL, "IF v_lapsed > 0 THEN", "IF false THEN"},
	"leave-stays": {"WaiterLeaves", &leaveSQL,
		"  DELETE FROM @schema@.queue WHERE job = p_job AND worker = p_holder;\n", ""},
	"crash-counts-every-slot": {"CrashCountedWhileOthersWait", &libSQL,
		"ELSE r.token = p_token END", "ELSE true END"},
	"scan-counts-live-slots": {"ScanCountsEachSlot", &libSQL,
		"CASE WHEN p_token IS NULL THEN r.live_until <= p_now", "CASE WHEN p_token IS NULL THEN true"},
	"refusal-keeps-the-waiter": {"FollowsTheRules", &libSQL,
		"  DELETE FROM @schema@.queue WHERE job = p_job AND worker = p_holder;\n  IF FOUND THEN", "  IF false THEN"},
	"release-wakes-no-waiter": {"WakeInTurn", &releaseSQL, "  PERFORM @schema@._wake_waiters(p_job, v_now);\n", ""},
	"leave-wakes-no-waiter":   {"WakeInTurn", &leaveSQL, "    PERFORM @schema@._left_queue(p_job, v_now);\n", ""},
	"refusal-wakes-no-waiter": {"RefusedHeadWakesNext", &libSQL, "    PERFORM @schema@._left_queue(p_job, p_now);\n", ""},
	"waiter-leaving-tells-not-the-job": {"RefusedHeadWakesNext", &libSQL,
		"    PERFORM pg_notify(@schema@._channel(p_job), '');\n", ""},
	"crash-wakes-no-waiter": {"CrashesWakeInTurn", &libSQL,
		"  PERFORM @schema@._wake_waiters(c.job, p_now) FROM", "  PERFORM FROM"},
	"scan-wakes-no-waiter": {"CountedCrashesWakeInTurn", &libSQL,
		"  PERFORM @schema@._wake_waiters(c.job, p_now) FROM", "  PERFORM FROM"},
	"unquarantine-wakes-no-waiter": {"CrashesWakeInTurn", &unquarantineSQL, "  PERFORM @schema@._wake_waiters(p_job, v_now);\n", ""},
	"lifted-quarantine-wakes-no-waiter": {"CountedCrashesWakeInTurn", &recordLateSQL,
		"    PERFORM @schema@._wake_waiters(p_job, v_now);\n", ""},
	"giving-up-wakes-no-waiter": {"GiveUpWakesNext", &recordLateSQL,
		"    PERFORM @schema@._left_queue(p_job, v_now);\n", ""},
	"wakes-every-waiter": {"WakeInTurn", &libSQL,
		"q.live_until > p_now ORDER BY q.seq\n    LIMIT greatest(", "q.live_until > p_now ORDER BY q.seq\n    OFFSET 0 * greatest("},
}

// modelRuns is how many random sequences the model-based rule,
// FollowsTheRules, runs against a mutant: a sequence of 300 steps meets a
// given divergence only now and then (one in two caught a grant out of
// FIFO order), and the first that meets it fails.
const modelRuns = 10

// runs is how many times a mutant's rule runs.
func runs(rule string) int {
	if rule == "FollowsTheRules" {
		return modelRuns
	}
	return 1
}

// logLine is a line a test logged: the file and line that logged it.
var logLine = regexp.MustCompile(`^\s+\w+\.go:\d+: `)

// failure is the first line a failed conformance test logged.
func failure(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if logLine.MatchString(line) {
			return strings.TrimSpace(line)
		}
	}
	return "(no failure line)"
}

// Environment of the child test processes TestMutantsAreCaught starts.
const (
	mutantEnv = "PGSTORE_MUTANT" // the mutant the harness applies
	serverEnv = "PGSTORE_SERVER" // the superuser URL of a server to share
)

// mutate applies the mutant named in the environment, if any, to
// namespace's schema on the harness's server, after migrating it.
func (h harness) mutate(t testing.TB, namespace string) {
	name := os.Getenv(mutantEnv)
	if name == "" {
		return
	}
	m, ok := mutants[name]
	if !ok {
		t.Fatalf("no mutant %q", name)
	}
	if n := strings.Count(*m.template, m.old); n != 1 {
		t.Fatalf("mutant %s: its change applies %d times, want once", name, n)
	}
	migrated(t, h.srv, namespace)
	execSQL(t, h.srv, render(strings.Replace(*m.template, m.old, m.new, 1), namespace))
}

// TestMutantsAreCaught runs each mutant's rule in a child test process
// against the mutated store and wants it to fail. It takes about a minute,
// so it runs only with PGSTORE_MUTANTS=1 (go test -run TestMutants).
func TestMutantsAreCaught(t *testing.T) {
	if os.Getenv("PGSTORE_MUTANTS") != "1" || os.Getenv(mutantEnv) != "" {
		t.Skip("set PGSTORE_MUTANTS=1 to break the store against each conformance rule")
	}
	srv := testPG.Get(t)
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			// A change that no longer applies would fail the child too,
			// and pass for a caught mutant.
			if n := strings.Count(*m.template, m.old); n != 1 {
				t.Fatalf("mutant %s: its change applies %d times, want once", name, n)
			}
			cmd := exec.Command(os.Args[0], "-test.run", "^TestConformance$/^"+m.rule+"$", "-test.count="+itoa(runs(m.rule)),
				"-test.failfast", "-test.v")
			cmd.Env = append(os.Environ(), mutantEnv+"="+name, serverEnv+"="+srv.URL)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			if err == nil {
				t.Fatalf("rule %s passed against mutant %s:\n%s", m.rule, name, out.String())
			}
			if !strings.Contains(out.String(), "--- FAIL: TestConformance/"+m.rule) {
				t.Fatalf("mutant %s: the child failed, but not in rule %s:\n%s", name, m.rule, out.String())
			}
			t.Logf("rule %s caught mutant %s in %s: %s", m.rule, name, time.Since(start).Round(time.Millisecond), failure(out.String()))
		})
	}
}
