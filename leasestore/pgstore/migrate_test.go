package pgstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// v1Namespace is the namespace of testdata/schema_v1.sql, the schema as
// leasectl made it at version 1.
const v1Namespace = "pgstore-v1"

// v1Data is what a version 1 leasectl left in its schema.
type v1Data struct {
	jobs   []string                         // every job it wrote
	status map[string]*leasestore.JobStatus // each job's status, as version 1 read it
	live   *leasestore.Lease                // the live run of job "live"
}

// oldSchema makes namespace's schema on srv afresh with the script file,
// the schema as an older leasectl made it, and returns call, which calls
// one of its functions (format and args: the call, as that leasectl made
// it) and decodes the answer into v.
func oldSchema(t *testing.T, srv *pgtest.Server, namespace, file string) (call func(v any, format string, args ...any)) {
	t.Helper()
	script, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	schema := quoteIdent(namespace)
	execSQL(t, srv, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	execSQL(t, srv, string(script))
	return func(v any, format string, args ...any) {
		t.Helper()
		rows, err := srv.Query("SELECT " + schema + "." + fmt.Sprintf(format, args...))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(rows[0][0]), v); err != nil {
			t.Fatalf("%s: %v", rows[0][0], err)
		}
	}
}

// oldStatus is job's status as a leasectl of schema version v, before
// version 5, read it through call: its status function answered with the
// job's one run.
func oldStatus(call func(v any, format string, args ...any), v int, job string) *leasestore.JobStatus {
	var r struct {
		statusReply
		Run *runReply `json:"run"`
	}
	call(&r, "status(%d, %s)", v, quoteLiteral(job))
	if r.Run != nil {
		r.Runs = []runReply{*r.Run}
	}
	return r.status(job)
}

// loadV1 makes v1Namespace's schema on srv afresh with version 1's script,
// and writes to it through version 1's functions, called as a version 1
// leasectl called them: a live run, a completed run, and a job
// quarantined for crashing.
func loadV1(t *testing.T, srv *pgtest.Server) v1Data {
	t.Helper()
	call := oldSchema(t, srv, v1Namespace, "testdata/schema_v1.sql")
	// acquire(version, job, holder, host, pid, command, ttl µs, evidence
	// ttl µs, max crashes, min interval µs), version 1's signature.
	acquire := func(job, holder string, ttl time.Duration, maxCrashes int) acquireReply {
		t.Helper()
		var a acquireReply
		call(&a, "acquire(1, %s, %s, 'host-1', 4242, '{/bin/run,%s}', %d, %d, %d, 0)", quoteLiteral(job),
			quoteLiteral(holder), job, ttl.Microseconds(), storetest.EvidenceTTL.Microseconds(), maxCrashes)
		if a.Kind != "ok" {
			t.Fatalf("version 1's acquire of %s: %+v", job, a)
		}
		return a
	}
	var ok bool

	live := acquire("live", "w-live", storetest.LongTTL, 3)

	done := acquire("done", "w-done", storetest.LongTTL, 3)
	call(&ok, "release(1, 'done', %d, 'completed', 0, 0, 1500000000, '', 'completed exit 0 after 1.5s')", done.Token)

	// A run whose liveness expired at once (1 µs), counted by a scan at its
	// threshold of 1.
	acquire("crashy", "ghost", time.Microsecond, 1)
	var scan scanReply
	call(&scan, "scan(1, 1000)")
	if len(scan.Crashes) != 1 || !scan.Crashes[0].Quarantined {
		t.Fatalf("version 1's scan: %+v, want the ghost's crash, quarantining crashy", scan)
	}

	d := v1Data{
		jobs:   []string{"live", "done", "crashy"},
		status: map[string]*leasestore.JobStatus{},
		live: &leasestore.Lease{Job: "live", Holder: "w-live", Token: live.Token, Attempt: live.Attempt,
			TTL: storetest.LongTTL},
	}
	for _, job := range d.jobs {
		d.status[job] = oldStatus(call, 1, job)
	}
	return d
}

// TestMigrationFromVersion1 migrates a schema that a version 1 leasectl
// made and wrote to: the first call of this leasectl, or `leasectl store
// migrate`, brings it to the current version with every job's record, run
// and history intact, and a version 1 client is then refused rather than
// run against tables it does not know.
func TestMigrationFromVersion1(t *testing.T) {
	srv := testPG.Get(t)
	schema := quoteIdent(v1Namespace)

	check := func(t *testing.T, s *Store, v1 v1Data) {
		t.Helper()
		for _, job := range v1.jobs {
			st := storetest.Status(t, s, job)
			was := *v1.status[job]
			was.Now = st.Now
			// Version 3 gives the ends of runs their outcome, from the
			// first word of their detail (tables_v3.sql).
			was.History = slices.Clone(was.History)
			for i, e := range was.History {
				if word, _, _ := strings.Cut(e.Detail, " "); e.Kind == leasestore.EventReleased || e.Kind == leasestore.EventLateOutcome ||
					e.Kind == leasestore.EventCrashed && word == string(leasestore.ResultCrashed) {
					was.History[i].Result = leasestore.Result(word)
				}
			}
			if !reflect.DeepEqual(st, &was) {
				t.Errorf("job %s after the migration:\n%+v\nwant as version 1 had it, its ends of runs with their outcome:\n%+v", job, st, &was)
			}
		}
		wantCurrentSchema(t, srv, v1Namespace)

		// Version 1's acquire and renew are gone (they would grant by its
		// rules), and its other functions are this version's, which refuse
		// a version 1 client.
		var pe *pgconn.PgError
		_, err := srv.Query("SELECT " + schema + ".acquire(1, 'live', 'old', 'h', 1, '{}', 1000000, 2000000, 3, 0)")
		if !errors.As(err, &pe) || pe.Code != "42883" {
			t.Errorf("version 1's acquire after the migration: %v, want undefined_function (42883)", err)
		}
		_, err = srv.Query("SELECT " + schema + ".status(1, 'live')")
		if !errors.As(err, &pe) || pe.Code != codeVersion || pe.Detail != itoa(schemaVersion) {
			t.Errorf("version 1's call of status after the migration: %v, want %s with detail %d", err, codeVersion, schemaVersion)
		}
		if rows, err := srv.Query("SELECT count(*) FROM pg_proc WHERE pronamespace = " + quoteLiteral(v1Namespace) +
			"::regnamespace AND proname IN ('acquire', 'renew', '_rfc3339')"); err != nil || rows[0][0] != "2" {
			t.Errorf("acquire, renew and _rfc3339 functions: %q, %v; want one acquire and one renew", rows, err)
		}

		// The run version 1 granted goes on: it renews, now with its round
		// trip, and releases.
		l := *v1.live
		l.RTT = 2 * time.Millisecond
		if err := s.Renew(storetest.Ctx(t), &l); err != nil {
			t.Fatalf("Renew of version 1's live lease: %v", err)
		}
		if st := storetest.Status(t, s, "live"); st.Holder == nil || st.Holder.LastRTT != l.RTT {
			t.Errorf("holder after the renewal: %+v, want last round trip %s", st.Holder, l.RTT)
		}
		storetest.Release(t, s, &l, leasestore.ResultCompleted)

		// The next grant counts on from version 1's record, and records its
		// region.
		req := storetest.Request("done", "w-next", storetest.LongTTL)
		req.Region = "eu-west-1"
		next := storetest.Acquire(t, s, req)
		st := storetest.Status(t, s, "done")
		if was := v1.status["done"]; next.Attempt != was.Attempts+1 || next.Token <= was.LastToken ||
			st.Region != "eu-west-1" || len(st.History) != len(was.History)+1 {
			t.Errorf("grant after the migration: attempt %d, token %d, status %+v; want attempt %d, a token above %d, "+
				"region eu-west-1 and one event more", next.Attempt, next.Token, st, was.Attempts+1, was.LastToken)
		}
		if err := s.ReleaseQuarantine(storetest.Ctx(t), "crashy", leasestore.Note{By: "alice", Reason: "fixed"}); err != nil {
			t.Errorf("ReleaseQuarantine of the job version 1 quarantined: %v", err)
		}

		// The ghost whose crash version 1 counted gives up on its grant
		// late: the operator's release ended that crash's streak, so
		// nothing is withdrawn, and its acquire is refused from now on.
		gaveUp := leasestore.LateOutcome{Job: "crashy", Holder: "ghost", Outcome: storetest.Outcome(leasestore.ResultNotStarted)}
		if c, err := s.RecordLate(storetest.Ctx(t), gaveUp); err != nil || c.Released || c.CrashWithdrawn || c.Crashes != 0 {
			t.Errorf("RecordLate of version 1's ghost = %+v, %v; want nothing withdrawn, 0 crashes", c, err)
		}
		if _, err := s.Acquire(storetest.Ctx(t), storetest.Request("crashy", "ghost", storetest.LongTTL)); !errors.Is(err, leasestore.ErrLeaseLost) {
			t.Errorf("Acquire by the ghost that gave up = %v, want ErrLeaseLost", err)
		}
		storetest.Acquire(t, s, storetest.Request("crashy", "w-next", storetest.LongTTL))

		// Version 4's expectations count from the last success version 1
		// recorded: its due time, a column of the migrated rows, is that
		// success plus the period, and the migration alone took longer
		// than a millisecond.
		alice := leasestore.Note{By: "alice", Reason: "hourly"}
		if err := s.Expect(storetest.Ctx(t), "done", &leasestore.Expectation{Every: time.Millisecond}, alice); err != nil {
			t.Fatalf("Expect on a migrated job: %v", err)
		}
		if rows, err := srv.Query("SELECT due_at = last_success + interval '1 millisecond' FROM " + schema + ".jobs WHERE job = 'done'"); err != nil ||
			len(rows) != 1 || rows[0][0] != "t" {
			t.Errorf("due_at of a migrated job: %q, %v; want its last success + 1ms", rows, err)
		}
		overdue, err := s.Overdue(storetest.Ctx(t))
		if err != nil || len(overdue) != 1 || overdue[0].Job != "done" || !overdue[0].LastSuccess.Equal(v1.status["done"].LastSuccess) {
			t.Errorf("Overdue() = %+v, %v; want done, last succeeded at %v", overdue, err, v1.status["done"].LastSuccess)
		}
	}

	t.Run("leasectl store migrate", func(t *testing.T) {
		v1 := loadV1(t, srv)
		s := openPG(t, srv.URL, v1Namespace)
		got, from, to, err := s.Migrate(pgCall(t, storetest.HangGuard))
		if err != nil || got != v1Namespace || from != 1 || to != schemaVersion {
			t.Fatalf("Migrate = %s, %d, %d, %v; want %s from 1 to %d", got, from, to, err, v1Namespace, schemaVersion)
		}
		check(t, s, v1)
	})
	t.Run("on first use", func(t *testing.T) {
		v1 := loadV1(t, srv)
		check(t, openPG(t, srv.URL, v1Namespace), v1)
	})
}

// TestMigrationFromVersion6: version 7 changes the functions alone, and
// drops version 6's _refused, whose arguments changed, so that no function
// of version 6 is left beside version 7's.
func TestMigrationFromVersion6(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	migrated(t, srv, ns)
	execSQL(t, srv, fmt.Sprintf(`CREATE FUNCTION %[1]s._refused(p_job text, p_holder text, p_answer json) RETURNS json
		LANGUAGE sql AS $$ SELECT p_answer $$;
		UPDATE %[1]s.meta SET version = 6`, quoteIdent(ns)))
	if _, from, to, err := openPG(t, srv.URL, ns).Migrate(pgCall(t, storetest.HangGuard)); err != nil || from != 6 || to != schemaVersion {
		t.Fatalf("Migrate = %d, %d, %v; want from 6 to %d", from, to, err, schemaVersion)
	}
	wantCurrentSchema(t, srv, ns)
}
