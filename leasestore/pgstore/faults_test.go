package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// awaitWake fails the test unless sub delivers a notification in time.
func awaitWake(t *testing.T, sub leasestore.Subscription, after string) {
	t.Helper()
	select {
	case <-sub.Released():
	case <-time.After(storetest.HangGuard):
		t.Fatalf("no notification within %s after %s", storetest.HangGuard, after)
	}
}

// terminate ends every backend of srv whose application_name is app, as an
// operator's pg_terminate_backend would, waits until they are gone, and
// returns how many it ended. pg_terminate_backend only signals a backend;
// the wait is what makes the test see the connections dead before its next
// call, rather than racing the backends' exit.
func terminate(t *testing.T, srv *pgtest.Server, app string) int {
	t.Helper()
	rows, err := srv.Query(fmt.Sprintf(
		"SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", quoteLiteral(app)))
	if err != nil {
		t.Fatal(err)
	}
	pids := make([]string, len(rows))
	for i, r := range rows {
		pids[i] = r[0]
	}
	deadline := time.Now().Add(storetest.HangGuard)
	for len(pids) > 0 {
		left, err := srv.Query("SELECT pid FROM pg_stat_activity WHERE pid IN (" + strings.Join(pids, ",") + ")")
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backends %v still there %s after pg_terminate_backend", left, storetest.HangGuard)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return len(rows)
}

// withApp is rawURL with application_name set to app, so that a test can
// find its connections in pg_stat_activity.
func withApp(rawURL, app string) string {
	return rawURL + "&application_name=" + app
}

func TestRestartDuringALeaseKeepsIt(t *testing.T) {
	srv := ownPG(t)
	s := openPG(t, srv.URL, "ns")
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	waiter := openPG(t, srv.URL, "ns")
	sub, err := waiter.Subscribe(pgCall(t, storetest.HangGuard), "job", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Unlike a Redis without persistence, PostgreSQL keeps what it
	// committed: the lease survives, and the renewal goes out on a new
	// connection, the pooled one being seen dead before it is used.
	if err := s.Renew(pgCall(t, storetest.HangGuard), l); err != nil {
		t.Fatalf("Renew after a restart: %v, want the lease kept", err)
	}
	// The subscription lost its connection: it reconnects and wakes its
	// waiter, which may have missed a release meanwhile.
	awaitWake(t, sub, "the server restarted")
	storetest.Release(t, s, l, leasestore.ResultCompleted)
	awaitWake(t, sub, "a release after the restart")
	if l2 := storetest.Acquire(t, waiter, storetest.Request("job", "w2", storetest.LongTTL)); l2.Token <= l.Token {
		t.Fatalf("token after the restart %d is not above %d", l2.Token, l.Token)
	}
}

func TestFrozenServerReturnsAtTheDeadline(t *testing.T) {
	srv := ownPG(t)
	s := openPG(t, srv.URL, "ns")
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Thaw() })
	storetest.WantFrozenCallsReturn(t, s, l, func(t testing.TB) leasestore.Driver { return openPG(t, srv.URL, "ns") },
		"before the deadline", srv.Password)
}

func TestTerminatedBackendsReconnect(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	url := withApp(srv.URL, ns)
	s := openPG(t, url, ns)
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	waiter := openPG(t, url, ns)
	sub, err := waiter.Subscribe(pgCall(t, storetest.HangGuard), "job", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if n := terminate(t, srv, ns); n < 2 {
		t.Fatalf("terminated %d backends, want the store's and the subscription's", n)
	}
	if err := s.Renew(pgCall(t, storetest.HangGuard), l); err != nil {
		t.Fatalf("Renew after pg_terminate_backend: %v, want it on a new connection", err)
	}
	awaitWake(t, sub, "its connection was terminated")
	storetest.Release(t, s, l, leasestore.ResultCompleted)
	awaitWake(t, sub, "a release after the subscription reconnected")
}

func TestReadOnlySessionsSayWhy(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	migrated(t, srv, ns)
	url := role(t, srv, "readonly", "ro-Pa55",
		"GRANT USAGE ON SCHEMA "+quoteIdent(ns)+" TO readonly",
		"ALTER ROLE readonly SET default_transaction_read_only = on")
	s := openPG(t, url, ns)
	_, err := s.Acquire(pgCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
	storetest.WantUnavailable(t, err, "refuses writes", "ro-Pa55")
	if !strings.Contains(err.Error(), "default_transaction_read_only") {
		t.Errorf("error %q does not name default_transaction_read_only", err)
	}
	// Reading works on a read-only session, as on a standby.
	if st := storetest.Status(t, s, "job"); st.State != leasestore.StateIdle {
		t.Errorf("status %s, want %s", st.State, leasestore.StateIdle)
	}
}

func TestRolesWithoutRightsSayWhich(t *testing.T) {
	srv := testPG.Get(t)
	execSQL(t, srv, "REVOKE CREATE ON DATABASE postgres FROM PUBLIC; REVOKE CREATE ON SCHEMA public FROM PUBLIC")

	t.Run("may not create the schema", func(t *testing.T) {
		url := role(t, srv, "nocreate", "nc-Pa55")
		_, err := openPG(t, url, freshNamespace()).Acquire(pgCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, `the PostgreSQL role "nocreate" lacks a right leasectl needs: permission denied for database postgres`, "nc-Pa55")
		if !strings.Contains(err.Error(), "leasectl store migrate") {
			t.Errorf("error %q does not say how to migrate by hand", err)
		}
	})
	t.Run("no usage of the schema", func(t *testing.T) {
		ns := freshNamespace()
		migrated(t, srv, ns)
		url := role(t, srv, "nousage", "nu-Pa55")
		_, err := openPG(t, url, ns).Acquire(pgCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "permission denied for schema "+ns, "nu-Pa55")
		if !strings.Contains(err.Error(), "GRANT USAGE ON SCHEMA") {
			t.Errorf("error %q does not say which grant is missing", err)
		}
	})
	t.Run("usage of the schema is all it takes", func(t *testing.T) {
		ns := freshNamespace()
		migrated(t, srv, ns)
		url := role(t, srv, "runner", "ru-Pa55", "GRANT USAGE ON SCHEMA "+quoteIdent(ns)+" TO runner")
		s := openPG(t, url, ns)
		l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
		if err := s.Renew(pgCall(t, storetest.HangGuard), l); err != nil {
			t.Fatal(err)
		}
		storetest.Release(t, s, l, leasestore.ResultCompleted)
		if _, err := s.Scan(pgCall(t, storetest.HangGuard)); err != nil {
			t.Fatal(err)
		}
		// The functions are the only way in: the tables themselves are
		// not the runner's to change.
		rawConn, err := pgconn.Connect(pgCall(t, storetest.HangGuard), url)
		if err != nil {
			t.Fatal(err)
		}
		defer rawConn.Close(context.Background())
		_, err = rawConn.Exec(pgCall(t, storetest.HangGuard), "UPDATE "+quoteIdent(ns)+".jobs SET last_token = 0").ReadAll()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("the runner changed the tables directly: %v", err)
		}
	})
}

func TestMigrationsFromManyProcessesAtOnce(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	const clients = 12
	var wg sync.WaitGroup
	errs := make([]error, clients)
	start := make(chan struct{})
	for i := range clients {
		s := openPG(t, srv.URL, ns)
		wg.Go(func() {
			<-start
			if i%2 == 0 {
				_, _, _, errs[i] = s.Migrate(pgCall(t, storetest.HangGuard))
				return
			}
			_, errs[i] = s.Acquire(pgCall(t, storetest.HangGuard), storetest.Request(fmt.Sprintf("job%d", i), "w", storetest.LongTTL))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v", i, err)
		}
	}
	wantCurrentSchema(t, srv, ns)
	schema, from, to, err := openPG(t, srv.URL, ns).Migrate(pgCall(t, storetest.HangGuard))
	if err != nil || schema != ns || from != schemaVersion || to != schemaVersion {
		t.Errorf("Migrate of a current schema = %s, %d, %d, %v; want %s from %d to %d", schema, from, to, err, ns, schemaVersion, schemaVersion)
	}
}

// TestSchemaVersions replaces the acquire function with one that says
// its schema is at another version, as an older or newer leasectl's
// migration would leave it. (TestMigrationFromVersion1 migrates the
// schema an older leasectl really made.)
func TestSchemaVersions(t *testing.T) {
	srv := testPG.Get(t)
	atVersion := func(ns string, v int) {
		execSQL(t, srv, fmt.Sprintf(`DROP FUNCTION %[1]s.acquire;
			CREATE FUNCTION %[1]s.acquire(integer, text, text, text, integer, text[], bigint, bigint, integer, bigint,
			  text, bigint, bigint, bigint, integer, boolean)
			RETURNS json LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'at version %d' USING ERRCODE = 'LC001', DETAIL = '%[2]d'; END $$;
			UPDATE %[1]s.meta SET version = %[2]d`, quoteIdent(ns), v))
	}

	t.Run("older: migrated on first use", func(t *testing.T) {
		ns := freshNamespace()
		migrated(t, srv, ns)
		// Version 0 is an empty schema.
		execSQL(t, srv, fmt.Sprintf("DROP TABLE %[1]s.jobs, %[1]s.runs, %[1]s.history, %[1]s.queue CASCADE", quoteIdent(ns)))
		atVersion(ns, 0)
		storetest.Acquire(t, openPG(t, srv.URL, ns), storetest.Request("job", "w1", storetest.LongTTL))
	})
	t.Run("functions missing: made again", func(t *testing.T) {
		ns := freshNamespace()
		migrated(t, srv, ns)
		execSQL(t, srv, "DROP FUNCTION "+quoteIdent(ns)+".acquire")
		storetest.Acquire(t, openPG(t, srv.URL, ns), storetest.Request("job", "w1", storetest.LongTTL))
	})
	t.Run("newer: refused", func(t *testing.T) {
		ns := freshNamespace()
		migrated(t, srv, ns)
		atVersion(ns, schemaVersion+1)
		s := openPG(t, srv.URL, ns)
		_, err := s.Acquire(pgCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "newer than this leasectl's")
		_, _, _, err = s.Migrate(pgCall(t, storetest.HangGuard))
		var newer *NewerSchemaError
		if !errors.As(err, &newer) || newer.Version != schemaVersion+1 {
			t.Errorf("Migrate of a newer schema = %v, want a *NewerSchemaError at version %d", err, schemaVersion+1)
		}
	})
}

// TestScanSkipsJobsLockedElsewhere holds a crashed job's row locked, as
// another reaper or an acquire in progress would: a scan must not wait for
// it, and must count it once the lock is gone.
func TestScanSkipsJobsLockedElsewhere(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	s := openPG(t, srv.URL, ns)
	storetest.CrashRun(t, s, "locked", "w1", 3)
	storetest.CrashRun(t, s, "free", "w2", 3)

	locker, err := pgconn.Connect(pgCall(t, storetest.HangGuard), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(context.Background())
	_, err = locker.Exec(pgCall(t, storetest.HangGuard),
		"BEGIN; SELECT FROM "+quoteIdent(ns)+".jobs WHERE job = 'locked' FOR UPDATE").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	found, err := s.Scan(pgCall(t, storetest.HangGuard))
	if err != nil {
		t.Fatalf("Scan with a job locked elsewhere: %v (it must skip the job, not wait for it)", err)
	}
	if len(found) != 1 || found[0].Job != "free" {
		t.Fatalf("Scan found %+v, want only the crash of the job nobody held", found)
	}
	if _, err := locker.Exec(pgCall(t, storetest.HangGuard), "COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	found, err = s.Scan(pgCall(t, storetest.HangGuard))
	if err != nil || len(found) != 1 || found[0].Job != "locked" {
		t.Fatalf("Scan after the lock was released = %+v, %v; want the crash of job locked", found, err)
	}
}

// TestScanInBatches crashes more runs than one scan transaction takes: the
// scan goes on batch after batch and counts every one.
func TestScanInBatches(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	f := storetest.Fixture{Open: func(t testing.TB) leasestore.Driver { return openPG(t, srv.URL, ns) }}
	const runs = scanBatch + scanBatch/2
	storetest.Seed(t, f, runs, func(s storetest.Client, i int) error {
		req := storetest.Request(fmt.Sprintf("crash-%04d", i), "w", time.Millisecond)
		_, err := s.Acquire(context.Background(), req)
		return err
	})
	time.Sleep(5 * time.Millisecond)
	found, err := openPG(t, srv.URL, ns).Scan(pgCall(t, 4*storetest.HangGuard))
	if err != nil || len(found) != runs {
		t.Fatalf("Scan found %d crashes, %v; want %d", len(found), err, runs)
	}
}

func TestUnreachableServer(t *testing.T) {
	srv := ownPG(t)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	s := openPG(t, srv.URL, "ns")
	_, err := s.Acquire(pgCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
	storetest.WantUnavailable(t, err, fmt.Sprintf("cannot connect to PostgreSQL at %s:%d", srv.Host, srv.Port), srv.Password)
}

func TestTextLeasectlCannotKeep(t *testing.T) {
	s := openPG(t, testPG.Get(t).URL, freshNamespace())
	req := storetest.Request("job", "bad\xffworker", storetest.LongTTL)
	if _, err := s.Acquire(pgCall(t, storetest.HangGuard), req); err == nil || errors.Is(err, leasestore.ErrUnavailable) {
		t.Errorf("Acquire by a worker ID that is not UTF-8 = %v, want a plain error before any I/O", err)
	}
	req = storetest.Request("job", "w1", storetest.LongTTL)
	req.Command = []string{"/bin/cat", "caf\xe9.txt", `"quoted" \ back`}
	storetest.Acquire(t, s, req)
	st := storetest.Status(t, s, "job")
	if want := []string{"/bin/cat", "caf\uFFFD.txt", `"quoted" \ back`}; st.Holder == nil || strings.Join(st.Holder.Command, "|") != strings.Join(want, "|") {
		t.Errorf("command kept as %q, want %q", st.Holder.Command, want)
	}
}

// pgBouncer starts a PgBouncer in transaction pooling mode in front of the
// shared server, stopped when the test ends; the test is skipped where
// PgBouncer is not installed.
func pgBouncer(t *testing.T) *pgtest.PgBouncer {
	t.Helper()
	b, err := testPG.Get(t).StartPgBouncer()
	if errors.Is(err, pgtest.ErrNoPgBouncer) {
		t.Skip(err)
	}
	return testserver.Own(t, b, err)
}

// TestThroughPgBouncer runs the store through PgBouncer in transaction
// pooling mode, where each of its calls, one transaction each, may meet
// another server session: migration, transitions and the reaper work
// there (LISTEN does not: waiters then wake at the holder's expiry).
func TestThroughPgBouncer(t *testing.T) {
	b := pgBouncer(t)
	ns := freshNamespace()
	f := storetest.Fixture{Open: func(t testing.TB) leasestore.Driver { return openPG(t, b.URL, ns) }}
	var grants, held atomic.Int64
	storetest.Seed(t, f, 16, func(s storetest.Client, i int) error {
		_, err := s.Acquire(context.Background(), storetest.Request("job", fmt.Sprintf("w%d", i), storetest.LongTTL))
		var h *leasestore.HeldError
		switch {
		case err == nil:
			grants.Add(1)
		case errors.As(err, &h):
			held.Add(1)
		default:
			return err
		}
		return nil
	})
	if grants.Load() != 1 || held.Load() != 15 {
		t.Fatalf("%d grants and %d refusals among 16 acquirers, want 1 and 15", grants.Load(), held.Load())
	}
	s := openPG(t, b.URL, ns)
	storetest.CrashRun(t, s, "crashed", "w", 3)
	if found, err := s.Scan(pgCall(t, storetest.HangGuard)); err != nil || len(found) != 1 {
		t.Fatalf("Scan through PgBouncer = %+v, %v; want one crash", found, err)
	}
	l := storetest.Acquire(t, s, storetest.Request("crashed", "w2", storetest.LongTTL))
	if err := s.Renew(pgCall(t, storetest.HangGuard), l); err != nil {
		t.Fatal(err)
	}
	storetest.Release(t, s, l, leasestore.ResultCompleted)
	if st := storetest.Status(t, s, "crashed"); st.Crashes != 0 || st.LastOutcome == nil {
		t.Errorf("status through PgBouncer: %+v", st)
	}
	// A subscription's LISTEN goes through, and is useless there; it must
	// not fail nor hang the waiter, who also wakes at the holder's expiry.
	sub, err := s.Subscribe(pgCall(t, storetest.HangGuard), "job", "")
	if err != nil {
		t.Fatalf("Subscribe through PgBouncer: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("closing a subscription through PgBouncer: %v", err)
	}
}
