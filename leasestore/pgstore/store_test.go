package pgstore

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// testPG is the package's shared PostgreSQL.
var testPG = testserver.Share("test PostgreSQL", pgtest.Start, pgtest.Options{})

func TestMain(m *testing.M) {
	if url := os.Getenv(serverEnv); url != "" {
		// A child of TestMutantsAreCaught shares its parent's server.
		testPG = testserver.Borrow("test PostgreSQL", &pgtest.Server{URL: url})
	}
	code := testserver.Run(m, testPG)
	testenv.Cleanup()
	os.Exit(code)
}

// ownPG starts a server for one test, stopped when it ends.
func ownPG(t testing.TB) *pgtest.Server {
	t.Helper()
	srv, err := pgtest.Start(pgtest.Options{})
	return testserver.Own(t, srv, err)
}

var namespaces atomic.Int64

// freshNamespace is a namespace no other test uses, also in the other test
// processes that share a server (TestMutantsAreCaught's).
func freshNamespace() string {
	return fmt.Sprintf("t%d-%d", os.Getpid(), namespaces.Add(1))
}

// openPG opens a client closed when the test ends.
func openPG(t testing.TB, rawURL, namespace string) *Store {
	t.Helper()
	return storetest.Open(t, Open, rawURL, namespace)
}

// execSQL runs sql on srv as its superuser, failing the test on an error.
func execSQL(t testing.TB, srv *pgtest.Server, sql string) {
	t.Helper()
	if err := srv.Exec(sql); err != nil {
		t.Fatal(err)
	}
}

// harness makes each test's store in a namespace, and so a schema, of its
// own on srv; a wipe truncates the namespace's tables, as an operator
// cleaning up by hand (or a restore of an old backup) would.
type harness struct{ srv *pgtest.Server }

func (h harness) NewStore(t testing.TB) storetest.Fixture {
	ns := freshNamespace()
	h.mutate(t, ns)
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver { return openPG(t, h.srv.URL, ns) },
		Wipe: func(t testing.TB) {
			s := quoteIdent(ns)
			execSQL(t, h.srv, fmt.Sprintf("TRUNCATE %s.jobs, %[1]s.runs, %[1]s.history, %[1]s.queue", s))
		},
	}
}

func (harness) Abilities() storetest.Abilities {
	return storetest.Abilities{CommonHistoryWords: true, WakesInTurn: true}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness{testPG.Get(t)}) }

// pgCall bounds a call the way the supervisor does.
func pgCall(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

// role creates a login role with password on srv, dropped when the test
// ends, and returns its URL to the postgres database.
func role(t *testing.T, srv *pgtest.Server, name, password string, grants ...string) string {
	t.Helper()
	execSQL(t, srv, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD %s", quoteIdent(name), quoteLiteral(password)))
	for _, g := range grants {
		execSQL(t, srv, g)
	}
	t.Cleanup(func() {
		srv.Exec(fmt.Sprintf("DROP OWNED BY %[1]s CASCADE; DROP ROLE %[1]s", quoteIdent(name)))
	})
	return srv.URLFor(name, password, "postgres")
}

// migrated makes namespace's schema on srv as its superuser.
func migrated(t testing.TB, srv *pgtest.Server, namespace string) {
	t.Helper()
	if _, _, _, err := openPG(t, srv.URL, namespace).Migrate(pgCall(t, storetest.HangGuard)); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return fmt.Sprint(n) }

// wantCurrentSchema checks that namespace's meta table on srv holds one
// row, at this leasectl's schema version, and that no function is there
// twice (an earlier version's, with other arguments, left beside this
// one's).
func wantCurrentSchema(t *testing.T, srv *pgtest.Server, namespace string) {
	t.Helper()
	rows, err := srv.Query("SELECT version FROM " + quoteIdent(namespace) + ".meta")
	if err != nil || len(rows) != 1 || rows[0][0] != itoa(schemaVersion) {
		t.Errorf("meta: %q, %v; want one row at version %d", rows, err, schemaVersion)
	}
	rows, err = srv.Query("SELECT proname FROM pg_proc WHERE pronamespace = " + quoteLiteral(quoteIdent(namespace)) +
		"::regnamespace GROUP BY proname HAVING count(*) > 1")
	if err != nil || len(rows) != 0 {
		t.Errorf("functions there more than once: %q, %v; want none", rows, err)
	}
}

// rawConn runs sql at rawURL on a connection of its own, failing the test
// on an error.
func rawConn(t testing.TB, rawURL, sql string) {
	t.Helper()
	c, err := pgconn.Connect(pgCall(t, storetest.HangGuard), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(pgCall(t, storetest.HangGuard), sql).ReadAll(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
