package pgstore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// v4Namespace is the namespace of testdata/schema_v4.sql, the schema as
// leasectl made it at version 4, the last with one run per job.
const v4Namespace = "pgstore-v4"

// v4Data is what a version 4 leasectl left in its schema.
type v4Data struct {
	status map[string]*leasestore.JobStatus // each job's status, as version 4 read it
	live   *leasestore.Lease                // the live run of job "live"
	ghost  int64                            // the token of job "crashed"'s run, whose supervisor vanished
}

// v4Jobs are the jobs loadV4 writes.
var v4Jobs = []string{"live", "done", "crashed"}

// loadV4 makes v4Namespace's schema on srv afresh with version 4's script,
// and writes to it through version 4's functions, as a version 4 leasectl
// called them: a live run, a completed run, and a run whose supervisor
// vanished, its crash not yet counted.
func loadV4(t *testing.T, srv *pgtest.Server) v4Data {
	t.Helper()
	call := oldSchema(t, srv, v4Namespace, "testdata/schema_v4.sql")
	// acquire(version, job, holder, host, pid, command, ttl µs, evidence
	// ttl µs, max crashes, min interval µs, region, deadline µs, expect
	// every µs, expect grace µs), version 4's signature.
	acquire := func(job, holder string, ttl time.Duration) acquireReply {
		t.Helper()
		var a acquireReply
		call(&a, "acquire(4, %s, %s, 'host-1', 4242, '{/bin/run,%s}', %d, %d, 3, 0, '', 0, NULL, NULL)", quoteLiteral(job),
			quoteLiteral(holder), job, ttl.Microseconds(), storetest.EvidenceTTL.Microseconds())
		if a.Kind != "ok" {
			t.Fatalf("version 4's acquire of %s: %+v", job, a)
		}
		return a
	}
	live := acquire("live", "w-live", storetest.LongTTL)
	done := acquire("done", "w-done", storetest.LongTTL)
	var ok bool
	call(&ok, "release(4, 'done', %d, 'completed', 0, 0, 1500000000, '', 'completed exit 0 after 1.5s')", done.Token)
	// A run whose liveness expired at once (1 µs), its evidence there.
	ghost := acquire("crashed", "ghost", time.Microsecond)

	d := v4Data{
		status: map[string]*leasestore.JobStatus{},
		live: &leasestore.Lease{Job: "live", Holder: "w-live", Token: live.Token, Attempt: live.Attempt,
			TTL: storetest.LongTTL},
		ghost: ghost.Token,
	}
	for _, job := range v4Jobs {
		d.status[job] = oldStatus(call, 4, job)
	}
	return d
}

// TestMigrationFromVersion4 migrates a schema that a version 4 leasectl
// made and wrote to, with one run per job: every job's record, run and
// history are intact, each run in slot 0 of a job of one slot; the jobs
// then run in several slots; and a version 4 client is refused, as the
// README's upgrade order says, rather than misread a job of several runs.
func TestMigrationFromVersion4(t *testing.T) {
	srv := testPG.Get(t)
	schema := quoteIdent(v4Namespace)

	check := func(t *testing.T, s *Store, v4 v4Data) {
		t.Helper()
		for _, job := range v4Jobs {
			st := storetest.Status(t, s, job)
			was := *v4.status[job]
			was.Now = st.Now
			if was.Crashed != nil && st.Crashed != nil {
				c := *was.Crashed
				c.DetectedAt = st.Crashed.DetectedAt
				was.Crashed = &c
			}
			if !reflect.DeepEqual(st, &was) {
				t.Errorf("job %s after the migration:\n%+v\nwant as version 4 had it:\n%+v", job, st, &was)
			}
		}
		wantCurrentSchema(t, srv, v4Namespace)

		// Version 4's acquire and checktoken are gone (they would read one
		// run per job), and its other functions are this version's, which
		// refuse a version 4 client: its migration then says the schema is
		// newer (exit 69).
		var pe *pgconn.PgError
		for _, gone := range []string{
			"acquire(4, 'live', 'old', 'h', 1, '{}', 1000000, 2000000, 3, 0, '', 0, NULL, NULL)",
			"checktoken(4, 'live')",
		} {
			if _, err := srv.Query("SELECT " + schema + "." + gone); !errors.As(err, &pe) || pe.Code != "42883" {
				t.Errorf("version 4's %s after the migration: %v, want undefined_function (42883)", gone, err)
			}
		}
		for _, refused := range []string{"status(4, 'live')", "renew(4, 'live', 'w-live', 1, 1000000, 0)", "leases(4)"} {
			_, err := srv.Query("SELECT " + schema + "." + refused)
			if !errors.As(err, &pe) || pe.Code != codeVersion || pe.Detail != itoa(schemaVersion) {
				t.Errorf("version 4's call of %s after the migration: %v, want %s with detail %d", refused, err, codeVersion, schemaVersion)
			}
		}

		// The crash of the run whose supervisor vanished is counted once.
		crashes, err := s.Scan(storetest.Ctx(t))
		if err != nil || len(crashes) != 1 || crashes[0].Token != v4.ghost || crashes[0].Crashes != 1 {
			t.Errorf("Scan after the migration = %+v, %v; want the crash of version 4's ghost (token %d), counted once", crashes, err, v4.ghost)
		}

		// The run version 4 granted goes on, in slot 0 of one; the job's
		// runs in flight agree on one slot until it ends.
		l := *v4.live
		if err := s.Renew(storetest.Ctx(t), &l); err != nil {
			t.Fatalf("Renew of version 4's live lease: %v", err)
		}
		two := func(worker string) leasestore.AcquireRequest {
			req := storetest.Request("live", worker, storetest.LongTTL)
			req.Slots = 2
			return req
		}
		var slots *leasestore.SlotsError
		if _, err := s.Acquire(storetest.Ctx(t), two("a")); !errors.As(err, &slots) || slots.Slots != 1 || slots.Requested != 2 {
			t.Errorf("Acquire of 2 slots beside version 4's run = %v, want a *SlotsError of 1 slot against 2", err)
		}
		storetest.Release(t, s, &l, leasestore.ResultCompleted)
		a, b := storetest.Acquire(t, s, two("a")), storetest.Acquire(t, s, two("b"))
		if a.Slot != 0 || b.Slot != 1 || a.Token <= l.Token || b.Token <= a.Token || a.Attempt != l.Attempt+1 {
			t.Errorf("grants after the migration: %+v, %+v; want slots 0 and 1, tokens rising above %d, attempts on from %d",
				a, b, l.Token, l.Attempt)
		}
		if st := storetest.Status(t, s, "live"); st.Slots != 2 || len(st.Holders) != 2 {
			t.Errorf("status after the grants: %d slots, holders %+v; want 2 held", st.Slots, st.Holders)
		}
	}

	t.Run("leasectl store migrate", func(t *testing.T) {
		v4 := loadV4(t, srv)
		s := openPG(t, srv.URL, v4Namespace)
		got, from, to, err := s.Migrate(pgCall(t, storetest.HangGuard))
		if err != nil || got != v4Namespace || from != 4 || to != schemaVersion {
			t.Fatalf("Migrate = %s, %d, %d, %v; want %s from 4 to %d", got, from, to, err, v4Namespace, schemaVersion)
		}
		check(t, s, v4)
	})
	t.Run("on first use", func(t *testing.T) {
		v4 := loadV4(t, srv)
		check(t, openPG(t, srv.URL, v4Namespace), v4)
	})
}
